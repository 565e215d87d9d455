//! The memcached client's per-key passes of timeline_fanout/memcache/: the rendezvous placement
//! of `ring.winners`, the meta get replies of `wire.take_values` (the split of a batch by
//! server, `executor.by_owner`, is in lib.rs: it handles Python objects only). A reply is
//! decided here only in the form memcached writes (`EN`, or `VA <len> c<cas> t<ttl>` with a
//! plain length and time to live); anything else is left to the reference, which takes it or
//! raises its own error from the same position.

// MurmurHash3's x86 32-bit hash with seed 0 (`mmh3.mmh3_32_uintdigest`), which places keys,
// cut in two so a node's prefix is hashed once (`Seed`).
const C1: u32 = 0xcc9e_2d51;
const C2: u32 = 0x1b87_3593;

fn mix(k: u32) -> u32 {
    k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2)
}

/// The hash state `h` carried through `data`'s whole 4-byte blocks, and the bytes left over.
fn blocks(mut h: u32, data: &[u8]) -> (u32, &[u8]) {
    let mut whole = data.chunks_exact(4);
    for block in &mut whole {
        h ^= mix(u32::from_le_bytes([block[0], block[1], block[2], block[3]]));
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    (h, whole.remainder())
}

/// The hash of `len` bytes whose whole blocks left state `h` and `tail` (under 4 bytes).
fn finish(mut h: u32, tail: &[u8], len: usize) -> u32 {
    if !tail.is_empty() {
        h ^= mix(tail
            .iter()
            .rev()
            .fold(0, |k, byte| (k << 8) | u32::from(*byte)));
    }
    h ^= len as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// A node's `{node}-` prefix hashed through its whole blocks once: every family's score for
/// that node starts from there, so a batch hashes only each family (and the prefix's last
/// 0-3 bytes) per node. `score(f) == murmur3_32(prefix + f)`.
pub struct Seed {
    state: u32,
    rest: Vec<u8>,
    len: usize,
}

impl Seed {
    pub fn new(prefix: &[u8]) -> Self {
        let (state, rest) = blocks(0, prefix);
        Seed {
            state,
            rest: rest.to_vec(),
            len: prefix.len(),
        }
    }

    fn score(&self, family: &[u8], scratch: &mut Vec<u8>) -> u32 {
        let data = if self.rest.is_empty() {
            family
        } else {
            scratch.clear();
            scratch.extend_from_slice(&self.rest);
            scratch.extend_from_slice(family);
            scratch.as_slice()
        };
        let (h, tail) = blocks(self.state, data);
        finish(h, tail, self.len + family.len())
    }
}

/// `KeySpace.families` for one key: its first three `|`-separated parts if it has two `|` or more, else its
/// part before the first `|` (the whole key if none).
pub fn family(key: &[u8]) -> &[u8] {
    let mut bars = key
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'|')
        .map(|(at, _)| at);
    match (bars.next(), bars.next(), bars.next()) {
        (Some(_), Some(_), Some(third)) => &key[..third],
        (Some(first), None, _) => &key[..first],
        _ => key,
    }
}

/// The index of a family's owner among `seeds` (each node's `{node}-`, the nodes sorted):
/// the greatest hash of prefix and family, a tie to the later node. `scratch` is reused.
pub fn winner(seeds: &[Seed], family: &[u8], scratch: &mut Vec<u8>) -> usize {
    let mut best = (0, 0);
    for (rank, seed) in seeds.iter().enumerate() {
        let score = seed.score(family, scratch);
        if rank == 0 || score >= best.0 {
            best = (score, rank);
        }
    }
    best.1
}

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

    fn murmur3_32(data: &[u8]) -> u32 {
        let (h, tail) = blocks(0, data);
        finish(h, tail, data.len())
    }

    fn taken(step: Step<'_>) -> Option<usize> {
        match step {
            Step::Taken(_, next) => Some(next),
            _ => None,
        }
    }

    #[test]
    fn murmur3_is_mmh3s() {
        assert_eq!(murmur3_32(b"abc"), 3_017_643_002);
        assert_eq!(murmur3_32(b""), 0);
    }

    #[test]
    fn a_seed_scores_as_its_prefix_hashed_with_the_family() {
        let mut scratch = Vec::new();
        for prefix in [
            &b""[..],
            b"x-",
            b"m4:11211-",
            b"10.0.0.3:1-",
            b"127.0.0.1:11211-",
        ] {
            let seed = Seed::new(prefix);
            for family in [&b""[..], b"a", b"tf|tl|f1", b"ns|tl|1000000000000000001"] {
                let whole = [prefix, family].concat();
                assert_eq!(seed.score(family, &mut scratch), murmur3_32(&whole));
            }
        }
    }

    #[test]
    fn families_are_the_first_three_parts() {
        assert_eq!(family(b"a|b|c|d"), b"a|b|c");
        assert_eq!(family(b"a|b|c"), b"a|b|c");
        assert_eq!(family(b"a|b"), b"a");
        assert_eq!(family(b"ab"), b"ab");
    }

    #[test]
    fn replies_in_memcacheds_form_are_taken() {
        let buf = b"VA 2 c7 t-1\r\nab\r\nEN\r\n";
        assert_eq!(taken(next_reply(buf, 0, true)), Some(17));
        assert_eq!(taken(next_reply(buf, 17, true)), Some(21));
    }

    #[test]
    fn odd_forms_go_to_the_reference() {
        for line in [
            &b"VA 2 c7 t+1\r\nab\r\n"[..],
            b"VA 2 c7\r\nab\r\n",
            b"XX\r\n",
        ] {
            assert!(matches!(next_reply(line, 0, true), Step::Reference));
        }
    }

    #[test]
    fn a_cut_reply_asks_for_the_rest() {
        assert!(matches!(
            next_reply(b"VA 5 c1 t1\r\nab", 0, true),
            Step::Need(19)
        ));
        assert!(matches!(next_reply(b"VA 5", 0, true), Step::Need(5)));
    }
}
