//! The names a line of code defines, by a line pattern per language (no syntax tree): Rust
//! `fn/struct/enum/trait/impl/mod/const/static/type/union/macro_rules!`, Python `def/class`,
//! JavaScript and TypeScript `function/class/interface/type/enum` and `const x =` (exported or
//! not), Go `func/type`, Java, Kotlin, C# and Scala classes and methods, C and C++ types,
//! functions and macros, Ruby `def/class/module`, shell functions. A chunk's definitions are its
//! title and a weighted field of its ranking, so the file defining a name outranks those that
//! only mention it.

use std::sync::LazyLock;

use regex::Regex;

/// The languages whose definitions are recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lang {
    Rust,
    Python,
    Script,
    Go,
    Jvm,
    C,
    Ruby,
    Shell,
}

/// The language of a file, by its extension.
pub(crate) fn lang(path: &str) -> Option<Lang> {
    let ext = path.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match ext.as_str() {
        "rs" => Lang::Rust,
        "py" | "pyi" => Lang::Python,
        "js" | "jsx" | "mjs" | "cjs" | "ts" | "tsx" | "mts" | "cts" => Lang::Script,
        "go" => Lang::Go,
        "java" | "kt" | "kts" | "cs" | "scala" | "swift" => Lang::Jvm,
        "c" | "h" | "cc" | "cpp" | "cxx" | "hpp" | "hh" | "hxx" => Lang::C,
        "rb" => Lang::Ruby,
        "sh" | "bash" | "zsh" => Lang::Shell,
        _ => return None,
    })
}

/// The extensions a `lang:` qualifier names (`lang:rust`, `lang:py`, `ext:tsx`…).
pub(crate) fn extensions(name: &str) -> Vec<&'static str> {
    match name.to_ascii_lowercase().trim_start_matches('.') {
        "rust" | "rs" => vec!["rs"],
        "python" | "py" => vec!["py", "pyi"],
        "javascript" | "js" => vec!["js", "jsx", "mjs", "cjs"],
        "typescript" | "ts" => vec!["ts", "tsx", "mts", "cts"],
        "go" | "golang" => vec!["go"],
        "java" => vec!["java"],
        "kotlin" | "kt" => vec!["kt", "kts"],
        "csharp" | "c#" | "cs" => vec!["cs"],
        "c" => vec!["c", "h"],
        "cpp" | "c++" | "cxx" | "cc" => vec!["cc", "cpp", "cxx", "hpp", "hh", "hxx", "h"],
        "ruby" | "rb" => vec!["rb"],
        "shell" | "sh" | "bash" => vec!["sh", "bash", "zsh"],
        "markdown" | "md" => vec!["md", "markdown", "mdx"],
        "yaml" | "yml" => vec!["yaml", "yml"],
        "toml" => vec!["toml"],
        "json" => vec!["json"],
        "tsx" => vec!["tsx"],
        "jsx" => vec!["jsx"],
        "swift" => vec!["swift"],
        "scala" => vec!["scala"],
        "h" => vec!["h"],
        "txt" | "text" => vec!["txt"],
        _ => Vec::new(),
    }
}

/// A definition on one line: its kind (`fn`, `class`…) and name.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Definition {
    pub kind: &'static str,
    pub name: String,
}

impl Definition {
    /// As a title: `fn parse`, `impl Lexer`.
    pub(crate) fn label(&self) -> String {
        format!("{} {}", self.kind, self.name)
    }
}

fn re(pattern: &str) -> Regex {
    Regex::new(pattern).expect("the patterns are constants of this file, tested below")
}

static RUST: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:(?:default|async|const|unsafe|extern\s+\x22[^\x22]*\x22)\s+)*(fn|struct|enum|trait|mod|union|type|static|const)\s+(?:mut\s+)?([A-Za-z_][A-Za-z0-9_]*)",
    )
});
static RUST_IMPL: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"^\s*(?:unsafe\s+)?impl(?:\s*<[^{]*?>)?\s+(?:[A-Za-z_][\w:]*(?:<[^{]*?>)?\s+for\s+)?&?([A-Za-z_][\w:]*)",
    )
});
static RUST_MACRO: LazyLock<Regex> =
    LazyLock::new(|| re(r"^\s*macro_rules!\s*([A-Za-z_][A-Za-z0-9_]*)"));
static PYTHON: LazyLock<Regex> =
    LazyLock::new(|| re(r"^\s*(?:async\s+)?(def|class)\s+([A-Za-z_][A-Za-z0-9_]*)"));
static SCRIPT: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"^\s*(?:export\s+)?(?:default\s+)?(?:declare\s+)?(?:abstract\s+)?(?:async\s+)?(function\*?|class|interface|type|enum|const|let|var|namespace)\s+([A-Za-z_$][\w$]*)",
    )
});
static SCRIPT_METHOD: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"^\s+(?:(?:public|private|protected|static|async|readonly|get|set|override)\s+)*([A-Za-z_$][\w$]*)\s*\([^;]*\)\s*(?::[^{;]*)?\{\s*$",
    )
});
static GO: LazyLock<Regex> =
    LazyLock::new(|| re(r"^(func|type)\s+(?:\([^)]*\)\s*)?([A-Za-z_][A-Za-z0-9_]*)"));
static JVM_TYPE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"^\s*(?:(?:public|private|protected|internal|static|final|abstract|sealed|partial|open|data|inner|readonly|export)\s+)*(class|interface|enum|record|struct|object|trait|protocol)\s+([A-Za-z_][A-Za-z0-9_]*)",
    )
});
static JVM_METHOD: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"^\s*(?:(?:public|private|protected|internal|static|final|abstract|override|virtual|async|synchronized|open|suspend)\s+)*(?:fun\s+|func\s+|def\s+|[A-Za-z_][\w<>\[\],.? ]*\s+)([A-Za-z_][A-Za-z0-9_]*)\s*(?:<[^>]*>)?\s*\(",
    )
});
static C_TYPE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"^\s*(?:typedef\s+)?(struct|class|enum|union|namespace)\s+([A-Za-z_][A-Za-z0-9_]*)\s*(?:[:{]|$)",
    )
});
static C_DEFINE: LazyLock<Regex> =
    LazyLock::new(|| re(r"^\s*#\s*define\s+([A-Za-z_][A-Za-z0-9_]*)"));
static C_FUNCTION: LazyLock<Regex> =
    LazyLock::new(|| re(r"^[A-Za-z_][\w\s\*&:<>,]*?[\s\*&]([A-Za-z_][\w:~]*)\s*\([^;]*$"));
static RUBY: LazyLock<Regex> =
    LazyLock::new(|| re(r"^\s*(def|class|module)\s+(?:self\.)?([A-Za-z_][A-Za-z0-9_?!]*)"));
static SHELL: LazyLock<Regex> =
    LazyLock::new(|| re(r"^\s*(?:function\s+([A-Za-z_][\w-]*)|([A-Za-z_][\w-]*)\s*\(\)\s*\{?)"));

/// Words that start a statement, never a definition (for the loose method patterns).
const STATEMENTS: &[&str] = &[
    "if", "for", "while", "switch", "return", "new", "else", "catch", "do", "throw", "case",
    "sizeof", "elif", "await", "yield", "delete", "using", "goto",
];

/// The definition on `line`, if it has one.
pub(crate) fn definition(lang: Lang, line: &str) -> Option<Definition> {
    let found = |kind: &'static str, name: &str| {
        Some(Definition {
            kind,
            name: name.to_owned(),
        })
    };
    match lang {
        Lang::Rust => {
            if let Some(c) = RUST_MACRO.captures(line) {
                return found("macro", &c[1]);
            }
            if let Some(c) = RUST_IMPL.captures(line) {
                let name = c[1].rsplit("::").next().unwrap_or(&c[1]);
                return found("impl", name);
            }
            let c = RUST.captures(line)?;
            let kind = match &c[1] {
                "fn" => "fn",
                "struct" => "struct",
                "enum" => "enum",
                "trait" => "trait",
                "mod" => "mod",
                "union" => "union",
                "type" => "type",
                "static" => "static",
                _ => "const",
            };
            found(kind, &c[2])
        }
        Lang::Python => {
            let c = PYTHON.captures(line)?;
            found(if &c[1] == "def" { "def" } else { "class" }, &c[2])
        }
        Lang::Script => {
            if let Some(c) = SCRIPT.captures(line) {
                let kind = match &c[1] {
                    "class" => "class",
                    "interface" => "interface",
                    "type" => "type",
                    "enum" => "enum",
                    "namespace" => "namespace",
                    "const" | "let" | "var" => {
                        // Only a top-level binding is a definition (not every local).
                        if line.starts_with(char::is_whitespace) {
                            return None;
                        }
                        "const"
                    }
                    _ => "function",
                };
                return found(kind, &c[2]);
            }
            let c = SCRIPT_METHOD.captures(line)?;
            (!STATEMENTS.contains(&&c[1])).then_some(())?;
            found("method", &c[1])
        }
        Lang::Go => {
            let c = GO.captures(line)?;
            found(if &c[1] == "func" { "func" } else { "type" }, &c[2])
        }
        Lang::Jvm => {
            if let Some(c) = JVM_TYPE.captures(line) {
                return found(kind_of(&c[1]), &c[2]);
            }
            let trimmed = line.trim_start();
            let first = trimmed.split(|c: char| !c.is_alphanumeric()).next()?;
            if STATEMENTS.contains(&first) || trimmed.ends_with(';') || trimmed.contains(" = ") {
                return None;
            }
            let c = JVM_METHOD.captures(line)?;
            (!STATEMENTS.contains(&&c[1])).then_some(())?;
            found("method", &c[1])
        }
        Lang::C => {
            if let Some(c) = C_DEFINE.captures(line) {
                return found("define", &c[1]);
            }
            if let Some(c) = C_TYPE.captures(line) {
                return found(kind_of(&c[1]), &c[2]);
            }
            // A function definition starts at the left margin and is not a declaration.
            if line.starts_with(char::is_whitespace) || line.trim_end().ends_with(';') {
                return None;
            }
            let first = line.split(|c: char| !c.is_alphanumeric()).next()?;
            if STATEMENTS.contains(&first) || first == "return" {
                return None;
            }
            let c = C_FUNCTION.captures(line)?;
            let name = c[1].rsplit("::").next().unwrap_or(&c[1]);
            found("function", name)
        }
        Lang::Ruby => {
            let c = RUBY.captures(line)?;
            found(kind_of(&c[1]), &c[2])
        }
        Lang::Shell => {
            let c = SHELL.captures(line)?;
            let name = c.get(1).or_else(|| c.get(2))?.as_str();
            found("function", name)
        }
    }
}

fn kind_of(word: &str) -> &'static str {
    match word {
        "interface" => "interface",
        "enum" => "enum",
        "record" => "record",
        "struct" => "struct",
        "object" => "object",
        "trait" => "trait",
        "protocol" => "protocol",
        "union" => "union",
        "namespace" => "namespace",
        "module" => "module",
        "def" => "def",
        _ => "class",
    }
}

/// Whether a line only introduces the definition after it (a comment, an attribute, a
/// decorator), so that a cut before the definition moves above it.
pub(crate) fn is_preamble(lang: Lang, line: &str) -> bool {
    let t = line.trim_start();
    match lang {
        Lang::Rust => t.starts_with("//") || t.starts_with("#["),
        Lang::Python => t.starts_with('#') || t.starts_with('@'),
        Lang::Ruby | Lang::Shell => t.starts_with('#'),
        _ => {
            t.starts_with("//")
                || t.starts_with("/*")
                || t.starts_with("* ")
                || t.starts_with("*/")
                || t == "*"
                || t.starts_with('@')
                || (lang == Lang::Jvm && t.starts_with('['))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(path: &str, line: &str) -> Option<String> {
        definition(lang(path)?, line).map(|d| d.label())
    }

    #[test]
    fn definitions_by_language() {
        let cases = [
            ("a.rs", "pub fn lex(input: &str) -> Vec<Token> {", "fn lex"),
            ("a.rs", "pub(crate) struct Lexer<'a> {", "struct Lexer"),
            ("a.rs", "impl<'a> Iterator for Lexer<'a> {", "impl Lexer"),
            (
                "a.rs",
                "impl fmt::Display for crate::x::Token {",
                "impl Token",
            ),
            ("a.rs", "pub const MAX: usize = 3;", "const MAX"),
            ("a.rs", "    pub async fn run(&self) {", "fn run"),
            ("a.rs", "macro_rules! bail {", "macro bail"),
            ("a.py", "async def load_dotenv(path):", "def load_dotenv"),
            ("a.py", "class DotEnv:", "class DotEnv"),
            (
                "a.ts",
                "export default async function handler(req) {",
                "function handler",
            ),
            (
                "a.js",
                "export const parseArgs = (argv) => {",
                "const parseArgs",
            ),
            ("a.ts", "export interface Options {", "interface Options"),
            (
                "a.go",
                "func (s *Server) ListenAndServe() error {",
                "func ListenAndServe",
            ),
            ("a.go", "type Config struct {", "type Config"),
            (
                "A.java",
                "public final class HttpServer {",
                "class HttpServer",
            ),
            (
                "A.java",
                "    public static int parsePort(String s) {",
                "method parsePort",
            ),
            (
                "a.c",
                "static int parse_port(const char *s)",
                "function parse_port",
            ),
            ("a.h", "#define MAX_PORT 65535", "define MAX_PORT"),
            ("a.cpp", "class Lexer : public Base {", "class Lexer"),
            ("a.rb", "  def self.load(path)", "def load"),
            ("a.sh", "install_deps() {", "function install_deps"),
        ];
        for (path, line, want) in cases {
            assert_eq!(def(path, line).as_deref(), Some(want), "{path}: {line}");
        }
        let not = [
            ("a.rs", "    let x = lex(input);"),
            ("a.rs", "// fn commented() {"),
            ("a.js", "    const local = 3;"),
            ("A.java", "        if (port > 0) {"),
            ("A.java", "        return parsePort(s);"),
            ("a.c", "    return parse_port(s);"),
            ("a.c", "int parse_port(const char *s);"),
            ("a.md", "fn lex() {"),
        ];
        for (path, line) in not {
            assert_eq!(def(path, line), None, "{path}: {line}");
        }
    }

    #[test]
    fn qualifier_languages() {
        assert_eq!(extensions("rust"), ["rs"]);
        assert!(extensions("ts").contains(&"tsx"));
        assert!(extensions("klingon").is_empty());
    }
}
