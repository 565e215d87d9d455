//! The memcached client's per-key passes of timeline_fanout/memcache/: the meta get replies of
//! `wire.take_values` and the split of a batch by server of `executor.by_owner`. A reply is
//! decided here only in the form memcached writes (`EN`, or `VA <len> c<cas> t<ttl>` with a
//! plain length and time to live); anything else is left to the reference, which takes it or
//! raises its own error from the same position.

/// Python's `bytes.split()` separators.
fn bytes_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// Digits of a value length: at most 15 (any more pass every buffer; the reference decides).
const LENGTH_DIGITS: usize = 15;
/// Digits of a time to live that fit an `i64` whatever they are.
const TTL_DIGITS: usize = 18;

/// One meta get reply.
pub enum Reply<'a> {
    Miss,
    Hit {
        value: &'a [u8],
        /// The CAS id without its `c` (empty when not asked for).
        cas: &'a [u8],
        /// `None` when not asked for.
        ttl: Option<i64>,
    },
}

/// What `next_reply` found at a position.
pub enum Step<'a> {
    /// A whole reply and the position after it.
    Taken(Reply<'a>, usize),
    /// Bytes needed from the position before the reply can be taken (the reference's count).
    Need(usize),
    /// Not in memcached's own form: the reference decides from the same position.
    Reference,
}

/// Plain ASCII digits (at most `most`) as a number.
fn digits(text: &[u8], most: usize) -> Option<i64> {
    if text.is_empty() || text.len() > most || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(text.iter().fold(0, |n, d| n * 10 + i64::from(d - b'0')))
}

/// A time to live as memcached writes it: `-1` or plain digits.
fn ttl(text: &[u8]) -> Option<i64> {
    match text.strip_prefix(b"-") {
        Some(rest) => digits(rest, TTL_DIGITS).map(|n| -n),
        None => digits(text, TTL_DIGITS),
    }
}

/// Where the first `\r\n` at or after `from` begins (Python's `buf.find(b"\r\n", from)`).
fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    loop {
        at += buf[at..].iter().position(|b| *b == b'\r')?;
        if buf.get(at + 1) == Some(&b'\n') {
            return Some(at);
        }
        at += 1;
    }
}

/// The reply at `buf[pos..]` (`pos` within `buf`): flags `v c t` if `writable`, else `v`.
pub fn next_reply(buf: &[u8], pos: usize, writable: bool) -> Step<'_> {
    let Some(eol) = line_end(buf, pos) else {
        return Step::Need(buf.len() - pos + 1);
    };
    let line = &buf[pos..eol];
    if line == b"EN" {
        return Step::Taken(Reply::Miss, eol + 2);
    }
    let head: Vec<&[u8]> = line
        .split(|b| bytes_space(*b))
        .filter(|part| !part.is_empty())
        .collect();
    let wanted = if writable { 4 } else { 2 };
    if head.len() != wanted || head[0] != b"VA" {
        return Step::Reference;
    }
    let Some(length) = digits(head[1], LENGTH_DIGITS) else {
        return Step::Reference;
    };
    let (cas, ttl) = if writable {
        match (head[2].strip_prefix(b"c"), head[3].strip_prefix(b"t")) {
            (Some(cas), Some(left)) => match ttl(left) {
                Some(left) => (cas, Some(left)),
                None => return Step::Reference,
            },
            _ => return Step::Reference,
        }
    } else {
        (&b""[..], None)
    };
    let end = eol + 2 + length as usize;
    if buf.len() < end + 2 {
        return Step::Need(end + 2 - pos);
    }
    let value = &buf[eol + 2..end];
    Step::Taken(Reply::Hit { value, cas, ttl }, end + 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(step: Step<'_>) -> Option<usize> {
        match step {
            Step::Taken(_, next) => Some(next),
            _ => None,
        }
    }

    #[test]
    fn replies_in_memcacheds_form_are_taken() {
        let buf = b"VA 2 c7 t-1\r\nab\r\nEN\r\n";
        assert_eq!(taken(next_reply(buf, 0, true)), Some(17));
        assert_eq!(taken(next_reply(buf, 17, true)), Some(21));
    }

    #[test]
    fn odd_forms_go_to_the_reference() {
        for line in [&b"VA 2 c7 t+1\r\nab\r\n"[..], b"VA 2 c7\r\nab\r\n", b"XX\r\n"] {
            assert!(matches!(next_reply(line, 0, true), Step::Reference));
        }
    }

    #[test]
    fn a_cut_reply_asks_for_the_rest() {
        assert!(matches!(next_reply(b"VA 5 c1 t1\r\nab", 0, true), Step::Need(19)));
        assert!(matches!(next_reply(b"VA 5", 0, true), Step::Need(5)));
    }
}
