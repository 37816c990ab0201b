//! A chain's cache text with only its header parsed ([`History`]): the header, the step
//! lines, and the moderator context joined from them (see the format in [`super`]).

use super::*;

/// A chain as its cache text, with only the header parsed: what a step needs (head, start,
/// position, visits, the moderator context) at a cost that does not grow with the chain.
#[derive(Debug, Clone)]
pub(crate) struct History {
    header: Header,
    /// The step lines, each ending in `\n`.
    lines: String,
}

/// The version of the cache file's format: files of another are rebuilt.
const FORMAT: u32 = 2;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Header {
    /// [`FORMAT`]; files from before it was written read as 0.
    #[serde(default)]
    version: u32,
    start_hash: Hash,
    #[serde(default)]
    start_size: u64,
    start: Start,
    start_timestamp: u64,
    head: Hash,
    len: usize,
    position: String,
    visits: std::collections::BTreeMap<String, usize>,
    /// The last step records its role's failure (left out when not, as in files from before).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    failed: bool,
    /// XXH64 of the step lines: a damaged file is noticed without parsing them.
    lines_xxh64: u64,
}

fn checksum(lines: &str) -> u64 {
    twox_hash::XxHash64::oneshot(0, lines.as_bytes())
}

impl History {
    /// The head: the last step, or the start node.
    pub(crate) fn head(&self) -> Hash {
        self.header.head
    }

    pub(crate) fn start_hash(&self) -> Hash {
        self.header.start_hash
    }

    pub(crate) fn start(&self) -> &Start {
        &self.header.start
    }

    /// How many steps.
    pub(crate) fn len(&self) -> usize {
        self.header.len
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.header.len == 0
    }

    /// The moderator's position: the last step's role, or `$START`.
    pub(crate) fn position(&self) -> &str {
        &self.header.position
    }

    /// How many steps of `role` the chain has.
    pub(crate) fn visits(&self, role: &str) -> usize {
        self.header.visits.get(role).copied().unwrap_or(0)
    }

    /// Whether the last step records its role's failure ([`Entry::error`]).
    pub(crate) fn failed(&self) -> bool {
        self.header.failed
    }

    /// The moderator context as JSON text (as [`Chain::context_json`]), joined from the lines.
    pub(crate) fn context_json(&self) -> String {
        let mut out = String::with_capacity(self.lines.len() + 256);
        write_context_start(&mut out, &self.header.start);
        for (i, line) in self.lines.lines().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(line_item(line).unwrap_or("null"));
        }
        out.push_str("]}");
        out
    }

    /// The whole chain, every step parsed.
    pub(crate) fn to_chain(&self) -> Option<Chain> {
        let steps = self
            .lines
            .lines()
            .map(parse_line)
            .collect::<Option<Vec<Entry>>>()?;
        (steps.len() == self.header.len).then(|| Chain {
            start_hash: self.header.start_hash,
            start: self.header.start.clone(),
            start_timestamp: self.header.start_timestamp,
            start_size: self.header.start_size,
            steps,
        })
    }

    /// This history with `entry` appended.
    pub(super) fn with(&self, entry: &Entry) -> History {
        let mut history = History {
            header: self.header.clone(),
            lines: String::with_capacity(self.lines.len() + entry.output_json().len() + 128),
        };
        history.lines.push_str(&self.lines);
        history.push(entry);
        history.seal();
        history
    }

    pub(super) fn of(chain: &Chain) -> History {
        let mut history = History {
            header: Header {
                version: FORMAT,
                start_hash: chain.start_hash,
                start_size: chain.start_size,
                start: chain.start.clone(),
                start_timestamp: chain.start_timestamp,
                head: chain.start_hash,
                len: 0,
                position: crate::engine::START.to_owned(),
                visits: std::collections::BTreeMap::new(),
                failed: false,
                lines_xxh64: 0,
            },
            lines: String::new(),
        };
        for s in &chain.steps {
            history.push(s);
        }
        history.seal();
        history
    }

    /// Appends a step's line and counts it in the header (the checksum is left to [`seal`]).
    ///
    /// [`seal`]: History::seal
    fn push(&mut self, entry: &Entry) {
        use std::fmt::Write;
        let header = &mut self.header;
        header.head = entry.hash;
        header.len += 1;
        header.position.clone_from(&entry.role);
        header.failed = entry.raw_error.is_some();
        *header.visits.entry(entry.role.clone()).or_insert(0) += 1;
        let sizes = entry.sizes;
        let _ = write!(
            self.lines,
            "{} {} {} {},{},{} ",
            entry.hash, entry.output_hash, entry.timestamp, sizes.step, sizes.output, sizes.detail
        );
        entry.write_context(&mut self.lines);
        self.lines.push('\n');
    }

    fn seal(&mut self) {
        self.header.lines_xxh64 = checksum(&self.lines);
    }

    pub(super) fn parse(mut text: String) -> Option<History> {
        let split = text.find('\n')?;
        let header: Header = serde_json::from_str(&text[..split]).ok()?;
        if header.version != FORMAT {
            return None;
        }
        let lines = text.split_off(split + 1);
        (checksum(&lines) == header.lines_xxh64).then_some(History { header, lines })
    }

    pub(super) fn to_text(&self) -> String {
        let header = serde_json::to_string(&self.header).expect("the header serializes");
        let mut text = String::with_capacity(header.len() + 1 + self.lines.len());
        text.push_str(&header);
        text.push('\n');
        text.push_str(&self.lines);
        text
    }
}

pub(super) fn write_context_start(out: &mut String, start: &Start) {
    out.push_str("{\"start\":{\"workflow\":\"");
    out.push_str(&start.workflow.to_string());
    out.push_str("\",\"prompt\":");
    out.push_str(&serde_json::to_string(&start.prompt).expect("strings serialize"));
    out.push_str("},\"steps\":[");
}

/// A cache line's fields: hash, output hash, timestamp, sizes, context item.
fn line_fields(line: &str) -> Option<[&str; 5]> {
    let mut parts = line.splitn(5, ' ');
    Some([
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    ])
}

/// The context item of a cache line.
fn line_item(line: &str) -> Option<&str> {
    line_fields(line).map(|[.., item]| item)
}

pub(super) fn parse_line(line: &str) -> Option<Entry> {
    #[derive(Deserialize)]
    struct Item {
        role: String,
        output: Box<RawValue>,
        detail: Hash,
        agent: String,
        #[serde(default)]
        error: Option<Box<RawValue>>,
    }
    let [hash, output_hash, timestamp, sizes, item] = line_fields(line)?;
    let hash = Hash::parse(hash).ok()?;
    let output_hash = Hash::parse(output_hash).ok()?;
    let timestamp = timestamp.parse().ok()?;
    let mut sizes = sizes.split(',').map(|n| n.parse::<u64>().ok());
    let sizes = Sizes {
        step: sizes.next()??,
        output: sizes.next()??,
        detail: sizes.next()??,
    };
    let item: Item = serde_json::from_str(item).ok()?;
    Some(Entry {
        hash,
        role: item.role,
        agent: item.agent,
        output_hash,
        raw_output: item.output,
        raw_error: item.error,
        detail: item.detail,
        timestamp,
        sizes,
    })
}
