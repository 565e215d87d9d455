//! Chunk tasks (timeline_fanout/schemas/events.py's `FanoutTask`) in the one wire form the
//! publisher writes: orjson's dump of the model with its envelope, fields in declaration order,
//! no spaces. Reading accepts exactly that form with every rule of the model met (ids, sizes,
//! integer ranges); anything else, valid or not, is left to the reference (pydantic), which
//! then gives the event or the error. Writing accepts fields that need no JSON escaping.

use crate::tokens::valid_id;

pub const MAX_CHUNK: usize = 10_000;
pub const MILLIS_LIMIT: u64 = 1 << 43;
const EVENT_ID_MAX: usize = 128;

/// A task's fields as read, borrowing the payload.
pub struct Task<'a> {
    pub event_id: &'a str,
    pub ts: u64,
    pub author: &'a str,
    pub post_id: &'a str,
    pub post_ts: u64,
    pub chunk: u64,
    pub followers: Vec<&'a str>,
}

/// An envelope's event id as the schema allows it (1..128 of `!`..`~`), without the two
/// characters JSON would escape.
pub fn plain_event_id(id: &[u8]) -> bool {
    !id.is_empty()
        && id.len() <= EVENT_ID_MAX
        && id
            .iter()
            .all(|&b| (b'!'..=b'~').contains(&b) && b != b'"' && b != b'\\')
}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn literal(&mut self, text: &[u8]) -> Option<()> {
        if self.data[self.at..].starts_with(text) {
            self.at += text.len();
            Some(())
        } else {
            None
        }
    }

    /// A string's bytes up to its closing quote (the opening one already read): no escapes.
    fn string(&mut self) -> Option<&'a [u8]> {
        let rest = &self.data[self.at..];
        let end = rest.iter().position(|&b| b == b'"')?;
        self.at += end + 1;
        Some(&rest[..end])
    }

    fn id(&mut self) -> Option<&'a str> {
        let id = self.string()?;
        // Ids are ASCII, so the bytes are the str.
        valid_id(id).then(|| std::str::from_utf8(id).ok())?
    }

    /// A non-negative integer as JSON writes it (no sign, no leading zero, no fraction), below
    /// `limit`.
    fn integer(&mut self, limit: u64) -> Option<u64> {
        let rest = &self.data[self.at..];
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 || digits > 18 || (digits > 1 && rest[0] == b'0') {
            return None;
        }
        let value = std::str::from_utf8(&rest[..digits])
            .ok()?
            .parse::<u64>()
            .ok()?;
        self.at += digits;
        (value < limit).then_some(value)
    }
}

pub fn read(payload: &[u8]) -> Option<Task<'_>> {
    let mut r = Reader {
        data: payload,
        at: 0,
    };
    r.literal(b"{\"event_id\":\"")?;
    let event_id = r.string()?;
    if !plain_event_id(event_id) {
        return None;
    }
    r.literal(b",\"ts\":")?;
    let ts = r.integer(MILLIS_LIMIT)?;
    r.literal(b",\"v\":1,\"type\":\"fanout_task\",\"author\":\"")?;
    let author = r.id()?;
    r.literal(b",\"post_id\":\"")?;
    let post_id = r.id()?;
    r.literal(b",\"post_ts\":")?;
    let post_ts = r.integer(MILLIS_LIMIT)?;
    r.literal(b",\"chunk\":")?;
    let chunk = r.integer(u64::MAX)?;
    r.literal(b",\"followers\":[")?;
    let mut followers = Vec::new();
    if r.literal(b"]").is_none() {
        loop {
            r.literal(b"\"")?;
            followers.push(r.id()?);
            if followers.len() > MAX_CHUNK {
                return None;
            }
            if r.literal(b",").is_none() {
                r.literal(b"]")?;
                break;
            }
        }
    }
    r.literal(b"}")?;
    if r.at != payload.len() {
        return None;
    }
    Some(Task {
        event_id: std::str::from_utf8(event_id).ok()?,
        ts,
        author,
        post_id,
        post_ts,
        chunk,
        followers,
    })
}

/// The wire form of a task whose fields are all valid; the caller checked them.
pub fn write(task: &Task<'_>) -> Vec<u8> {
    let size: usize = task.followers.iter().map(|f| f.len() + 3).sum();
    let mut out = Vec::with_capacity(size + 256);
    out.extend_from_slice(b"{\"event_id\":\"");
    out.extend_from_slice(task.event_id.as_bytes());
    out.extend_from_slice(format!("\",\"ts\":{},\"v\":1,", task.ts).as_bytes());
    out.extend_from_slice(b"\"type\":\"fanout_task\",\"author\":\"");
    out.extend_from_slice(task.author.as_bytes());
    out.extend_from_slice(b"\",\"post_id\":\"");
    out.extend_from_slice(task.post_id.as_bytes());
    let numbers = format!("\",\"post_ts\":{},\"chunk\":{},", task.post_ts, task.chunk);
    out.extend_from_slice(numbers.as_bytes());
    out.extend_from_slice(b"\"followers\":[");
    for (i, follower) in task.followers.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(follower.as_bytes());
        out.push(b'"');
    }
    out.extend_from_slice(b"]}");
    out
}
