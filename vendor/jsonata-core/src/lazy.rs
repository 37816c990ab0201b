//! Lazy Python dict views.
//!
//! A `LazyPyDict` wraps the caller's original `Py<PyDict>` and converts
//! fields to `JValue` on first access instead of eagerly converting the
//! whole tree at the boundary. Untouched fields are never converted, and
//! `json_to_python` passes untouched wrappers back out as the original
//! Python dict object.
//!
//! Invariant: lazy dicts wrap *caller data only* — the engine never wraps
//! its own constructed objects, so a `LazyPyDict` is never a tuple wrapper
//! (`__tuple__`) and never contains engine-internal keys.

use crate::value::JValue;
use indexmap::IndexMap;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyInt, PyString};
use std::cell::{Cell, OnceCell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

/// Conversion failure while lazily reading Python data mid-evaluation.
/// Carries the message of the underlying Python TypeError.
#[derive(Debug, Clone)]
pub struct LazyConvertError(pub String);

pub struct LazyPyDict {
    obj: Py<PyDict>,
    /// Converted-on-first-access fields, heap-typed values only (String,
    /// Array, Object, LazyPyDict). Scalars and absent-key `Undefined` are
    /// deliberately not cached — see `get_field`.
    field_cache: RefCell<HashMap<String, JValue>>,
    /// Memoized full materialization (for consumers that need a real object).
    materialized: OnceCell<Rc<crate::value::JMap>>,
    /// Set when `field_cache` or `materialized` takes an array, object or
    /// wrapper (never cleared until `take_held`), so the drop of a wrapper
    /// that cached only strings is one load (#233).
    holds_containers: Cell<bool>,
    /// How many wrappers sit above this one in a chain read down through
    /// `get_field` (0 for one made any other way). Drop checks the stack
    /// only every `LAZY_DROP_CHECK_EVERY` levels (#233).
    depth: Cell<u32>,
}

/// Wrapper levels between stack checks when a chain of wrappers is freed.
/// Each level between checks costs a few hundred bytes of drop glue, well
/// inside `value::DROP_RED_ZONE`.
const LAZY_DROP_CHECK_EVERY: u32 = 32;

impl std::fmt::Debug for LazyPyDict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyPyDict").finish_non_exhaustive()
    }
}

impl LazyPyDict {
    pub fn new(obj: Py<PyDict>) -> Self {
        LazyPyDict {
            obj,
            field_cache: RefCell::new(HashMap::new()),
            materialized: OnceCell::new(),
            holds_containers: Cell::new(false),
            depth: Cell::new(0),
        }
    }

    /// The wrapped Python dict (for output pass-through and identity checks).
    pub fn py_object(&self) -> &Py<PyDict> {
        &self.obj
    }

    /// Pointer identity of the wrapped dict (cheap equality fast path).
    pub fn same_object(&self, other: &LazyPyDict) -> bool {
        self.obj.as_ptr() == other.obj.as_ptr()
    }

    /// Read one field, converting on first access. Absent key → Undefined.
    ///
    /// Any `PyErr` raised while reading or converting the value -- not just the
    /// `PyTypeError` from `convert()`'s own unconvertible-type check, but also e.g.
    /// `OverflowError` from a Python int too large to fit an `i64`/`f64`, or an error
    /// from `dict.get_item` itself -- is captured here via `.to_string()` and wrapped in
    /// `LazyConvertError`, which `From<LazyConvertError> for EvaluatorError` maps to
    /// `PyConversionError` and ultimately a Python `TypeError` at the boundary. The
    /// original Python exception *type* is not preserved; only its message text is.
    pub fn get_field(&self, field: &str) -> Result<JValue, LazyConvertError> {
        if let Some(m) = self.materialized.get() {
            return Ok(m.get(field).cloned().unwrap_or(JValue::Undefined));
        }
        if let Some(v) = self.field_cache.borrow().get(field) {
            return Ok(v.clone());
        }
        Python::attach(|py| {
            let dict = self.obj.bind(py);
            let val = match dict
                .get_item(field)
                .map_err(|e| LazyConvertError(e.to_string()))?
            {
                Some(v) => convert(&v, true).map_err(|e| LazyConvertError(e.to_string()))?,
                None => JValue::Undefined,
            };
            // Cache only heap-typed conversions. Scalars (Number/Bool/Null) are
            // cheaper to reconvert (~one C-API call) than to cache (String key
            // alloc + HashMap insert), and Undefined (missing key) repeats are
            // rare. Heap values keep conversion reuse, and nested dicts MUST stay
            // cached so repeated access yields the same Rc-wrapped wrapper
            // (identity for PartialEq's Rc::ptr_eq fast path and transform target
            // detection).
            if matches!(
                val,
                JValue::String(_) | JValue::Array(_) | JValue::Object(_) | JValue::LazyPyDict(_)
            ) {
                if !matches!(val, JValue::String(_)) {
                    self.holds_containers.set(true);
                }
                if let JValue::LazyPyDict(child) = &val {
                    // A nested dict's new wrapper, one level further down.
                    child.depth.set(self.depth.get().wrapping_add(1));
                }
                self.field_cache
                    .borrow_mut()
                    .insert(field.to_string(), val.clone());
            }
            Ok(val)
        })
    }

    /// Key-presence check without converting the value.
    pub fn contains_field(&self, field: &str) -> bool {
        if let Some(m) = self.materialized.get() {
            return m.contains_key(field);
        }
        if let Some(v) = self.field_cache.borrow().get(field) {
            return !v.is_undefined();
        }
        Python::attach(|py| self.obj.bind(py).contains(field).unwrap_or(false))
    }

    /// Emptiness check without converting anything (used for truthiness).
    pub fn is_empty(&self) -> bool {
        if let Some(m) = self.materialized.get() {
            return m.is_empty();
        }
        Python::attach(|py| self.obj.bind(py).is_empty())
    }

    /// Full materialization. Iterates the Python dict in insertion order,
    /// reusing per-field cached (heap-typed) conversions where available and
    /// reconverting uncached (scalar) fields directly. Memoized.
    ///
    /// Iteration is over the dict's actual keys, so absent keys never
    /// appear here regardless of caching — `field_cache` only ever holds
    /// present-key values (scalars aren't cached at all; see `get_field`).
    pub fn to_object(&self) -> Result<Rc<crate::value::JMap>, LazyConvertError> {
        if let Some(m) = self.materialized.get() {
            return Ok(m.clone());
        }
        let map = Python::attach(|py| -> Result<IndexMap<String, JValue>, LazyConvertError> {
            let dict = self.obj.bind(py);
            let cache = self.field_cache.borrow();
            let mut map = IndexMap::with_capacity(dict.len());
            for (k, v) in dict.iter() {
                let key: String = k
                    .extract::<String>()
                    .map_err(|e| LazyConvertError(e.to_string()))?;
                let val = match cache.get(&key) {
                    Some(cached) => cached.clone(),
                    None => convert(&v, true).map_err(|e| LazyConvertError(e.to_string()))?,
                };
                map.insert(key, val);
            }
            Ok(map)
        })?;
        let rc = Rc::new(crate::value::JMap::from(map));
        let _ = self.materialized.set(rc.clone());
        self.holds_containers.set(true);
        Ok(rc)
    }

    /// Borrow the materialized map, materializing on first call.
    /// Returns `None` if conversion fails, and the failure is dropped here --
    /// this method has no way to report it. Callers that need the conversion
    /// error to actually surface (e.g. equality, concatenation) must not rely
    /// on this method; they should call `to_object()` (or the `normalize_lazy`
    /// helper in `evaluator.rs`) instead, which returns `Result` and propagates
    /// the error as a Python `TypeError` at the boundary.
    pub fn to_object_ref(&self) -> Option<&IndexMap<String, JValue>> {
        if self.materialized.get().is_none() {
            let _ = self.to_object();
        }
        self.materialized.get().map(|rc| &***rc)
    }

    /// Whether this wrapper may hold a converted array, object or wrapper
    /// (`false`: it holds strings at most).
    #[inline]
    pub(crate) fn holds_containers(&self) -> bool {
        self.holds_containers.get()
    }

    /// Whether `value` holds for any cached field, or `map` for the
    /// materialized map.
    pub(crate) fn any_held(
        &self,
        value: impl FnMut(&JValue) -> bool,
        map: impl FnOnce(&Rc<crate::value::JMap>) -> bool,
    ) -> bool {
        self.materialized.get().is_some_and(map) || self.field_cache.borrow().values().any(value)
    }

    /// Move out every converted value this wrapper holds (the materialized
    /// map as a `JValue::Object`), leaving it holding none.
    pub(crate) fn take_held(&mut self) -> impl Iterator<Item = JValue> {
        self.holds_containers.set(false);
        let materialized = self.materialized.take().map(JValue::Object);
        let cache = self.field_cache.get_mut();
        // Same hasher: no allocation, and no new random seed.
        let empty = HashMap::with_hasher(cache.hasher().clone());
        let cache = std::mem::replace(cache, empty);
        materialized.into_iter().chain(cache.into_values())
    }
}

/// A wrapper holds the converted values of the dicts nested in it (each a
/// `LazyPyDict` in turn), so a deep Python input read deep down is a chain
/// of wrappers: free it without recursing, as for arrays and objects (#233).
impl Drop for LazyPyDict {
    #[inline]
    fn drop(&mut self) {
        // Between checks the glue recursion is bounded: a chain through
        // lists or materialized maps passes `JItems`/`JMap` drops, which
        // check the stack themselves.
        if self.holds_containers.get()
            && self.depth.get() % LAZY_DROP_CHECK_EVERY == LAZY_DROP_CHECK_EVERY - 1
        {
            crate::value::drop_lazy_dict(self);
        }
    }
}

/// Single Python→JValue conversion routine.
/// `lazy=false` — today's eager deep conversion (used by JsonataData and bindings).
/// `lazy=true` — dicts become LazyPyDict wrappers; lists convert to eager Vecs
/// whose elements are converted with `lazy=true` (so dict elements wrap lazily).
pub fn convert(obj: &Bound<'_, PyAny>, lazy: bool) -> PyResult<JValue> {
    // SAFETY: `obj` is a live bound reference, so the borrowed pointer is
    // valid for the duration of the call and the GIL is held (Bound proves it).
    unsafe { convert_ptr(obj.py(), obj.as_ptr(), lazy) }
}

/// Type-dispatch conversion over a *borrowed* object pointer: one `Py_TYPE`
/// pointer compare per built-in scalar (exact types only — subclasses fall
/// through to `convert_slow`), a tp_flags check for list/dict (subclasses
/// included: pyo3's own iteration is C-level for these too, so semantics
/// don't change), and borrowed-reference list reads with no per-item
/// refcount traffic. This is the hot path for every `evaluate(dict)` call.
///
/// SAFETY: caller must guarantee `ptr` is a valid, non-null object pointer
/// that stays alive for the duration of the call, and that the GIL is held
/// (witnessed by `py`). No Python user code runs inside the fast paths, so
/// borrowed list elements cannot be invalidated mid-loop; the slow-path
/// fallback re-binds (increfs) before doing anything that could execute
/// arbitrary code (`__index__`/`__float__`/...).
unsafe fn convert_ptr(
    py: Python<'_>,
    ptr: *mut pyo3::ffi::PyObject,
    lazy: bool,
) -> PyResult<JValue> {
    use pyo3::ffi;
    use std::ptr::addr_of_mut;

    let tp = ffi::Py_TYPE(ptr);

    if tp == addr_of_mut!(ffi::PyLong_Type) {
        let v = ffi::PyLong_AsLongLong(ptr);
        if v == -1 && !ffi::PyErr_Occurred().is_null() {
            return Err(PyErr::fetch(py));
        }
        return Ok(JValue::Number(v as f64));
    }
    if tp == addr_of_mut!(ffi::PyFloat_Type) {
        return Ok(JValue::Number(ffi::PyFloat_AS_DOUBLE(ptr)));
    }
    if tp == addr_of_mut!(ffi::PyUnicode_Type) {
        let obj = Borrowed::from_ptr(py, ptr);
        return Ok(JValue::string(obj.cast_unchecked::<PyString>().to_str()?));
    }
    if ptr == ffi::Py_None() {
        return Ok(JValue::Null);
    }
    if tp == addr_of_mut!(ffi::PyBool_Type) {
        return Ok(JValue::Bool(ptr == ffi::Py_True()));
    }
    if ffi::PyList_Check(ptr) != 0 {
        // A Python list can nest arbitrarily deep; recurse on a grown stack
        // segment when the current one runs low (see `value::with_stack`).
        return crate::value::with_stack(|| {
            let len = ffi::PyList_GET_SIZE(ptr);
            let mut result = Vec::with_capacity(len as usize);
            // A converted list is never `cons`: the list is flat for a `$`
            // step when it holds no list (#196).
            let mut flat = true;
            for i in 0..len {
                // Borrowed reference; safe because nothing in convert_ptr can
                // trigger user code that mutates the list while we iterate.
                let item = ffi::PyList_GET_ITEM(ptr, i);
                let value = convert_ptr(py, item, lazy)?;
                flat &= !value.is_array();
                result.push(value);
            }
            Ok(JValue::Array(crate::value::JArray::new_flat(result, flat)))
        });
    }
    if ffi::PyDict_Check(ptr) != 0 {
        let dict = Borrowed::from_ptr(py, ptr).cast_unchecked::<PyDict>();
        if lazy {
            // One incref (`to_owned`), into the owned handle the wrapper keeps.
            let dict = dict.to_owned().unbind();
            // `new_cyclic` allocates before the wrapper exists, so no unwind
            // path here drops a `LazyPyDict`: its drop glue (with the #233
            // check) then has a single caller, `Rc::drop_slow`, and is
            // inlined there. (`Rc::new_uninit` needs Rust 1.82.)
            return Ok(JValue::LazyPyDict(Rc::new_cyclic(|_| {
                LazyPyDict::new(dict)
            })));
        }
        return crate::value::with_stack(|| convert_dict_eager(&dict));
    }

    // Scalar subclasses and everything else: re-bind (incref) and take the
    // extract-based chain, which may run user code — the strong reference
    // keeps `ptr` alive even if that code drops its owner (e.g. a list slot).
    let obj = Bound::from_borrowed_ptr(py, ptr);
    convert_slow(&obj)
}

/// Eagerly convert a dict (and everything under it) to a `JValue::Object`.
fn convert_dict_eager(dict: &Bound<'_, PyDict>) -> PyResult<JValue> {
    let mut result = IndexMap::with_capacity(dict.len());
    for (key, value) in dict.iter() {
        let key_str = key.extract::<String>()?;
        result.insert(key_str, convert(&value, false)?);
    }
    Ok(JValue::object(result))
}

/// Fallback for what `convert_ptr` doesn't dispatch: subclasses of the
/// scalar types, and duck-typed objects (numpy scalars etc.) via the
/// extract chain. `None`, `bool`, `list`, and `dict` (subclasses included)
/// never reach here.
fn convert_slow(obj: &Bound<'_, PyAny>) -> PyResult<JValue> {
    use pyo3::exceptions::PyTypeError;

    if obj.is_instance_of::<PyInt>() {
        return Ok(JValue::Number(obj.extract::<i64>()? as f64));
    }
    if obj.is_instance_of::<PyFloat>() {
        return Ok(JValue::Number(obj.extract::<f64>()?));
    }
    if obj.is_instance_of::<PyString>() {
        return Ok(JValue::string(obj.extract::<String>()?));
    }

    // Duck-typed fallback: numpy scalars etc. via __bool__/__index__/__float__.
    // (No String attempt — extract::<String> requires a str subclass, which
    // the is_instance_of branch above already caught.)
    if let Ok(b) = obj.extract::<bool>() {
        return Ok(JValue::Bool(b));
    }
    if let Ok(i) = obj.extract::<i64>() {
        return Ok(JValue::Number(i as f64));
    }
    if let Ok(f) = obj.extract::<f64>() {
        return Ok(JValue::Number(f));
    }

    Err(PyTypeError::new_err(format!(
        "Cannot convert Python object to JSON: {}",
        obj.get_type().name()?
    )))
}
