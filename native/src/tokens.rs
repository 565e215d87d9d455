//! The token-list decode of timeline_fanout/graph/lists/tokens.py (`decode`), byte for byte:
//! the add-only test, the add-only path's position stripping and splitting, and the general
//! path's last-writer-wins by position (a removal wins a tie). Positions of the form writers
//! write (`%x`: 1..16 lower- or upper-case hex digits) are decided here; any other (a sign,
//! `0x`, `_`, more digits) sends the whole list to the reference, whose `int(pos, 16)` decides.

use std::collections::HashMap;

/// What a list decodes to.
pub enum Decoded<'a> {
    /// The members (ASCII, possibly repeated) and the number of tokens.
    Members(Vec<&'a [u8]>, usize),
    /// A corrupt list, with the reference's reason.
    Corrupt(Corrupt),
    /// A token that is neither an addition nor a removal, or whose position does not parse.
    BadToken(&'a [u8]),
    /// Outside what is decided here: the reference decodes it.
    Reference,
}

pub enum Corrupt {
    BadPosition,
    NonAscii,
}

impl Corrupt {
    pub fn message(&self) -> &'static str {
        match self {
            Corrupt::BadPosition => "bad position in a list",
            Corrupt::NonAscii => "non-ASCII bytes in a list",
        }
    }
}

/// Python's `bytes.split()` separators.
fn bytes_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// Python's `str.split()` separators among ASCII characters: `bytes.split()`'s and 0x1c..0x1f.
fn str_space(b: u8) -> bool {
    bytes_space(b) || (0x1c..=0x1f).contains(&b)
}

fn lower_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

/// `tokens.NOT_AN_ID`: why a list of user ids holding something else is corrupt.
pub const NOT_AN_ID: &str = "a member that is not a user id";

/// `schemas.is_valid_id` for ASCII bytes.
pub fn valid_id(id: &[u8]) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'@' | b'-'))
}

pub fn decode(data: &[u8]) -> Decoded<'_> {
    let toks = data.split(|&b| bytes_space(b)).filter(|t| !t.is_empty());
    let count = toks.clone().count();
    if only_additions(data, count) {
        additions(data, count)
    } else {
        winners(&toks.collect::<Vec<_>>())
    }
}

/// `_only_additions`: every token starts with `+` and holds no other, none starts with `-`.
fn only_additions(data: &[u8], tokens: usize) -> bool {
    let mut starts = usize::from(data.first() == Some(&b'+'));
    let mut pluses = 0;
    for (i, &b) in data.iter().enumerate() {
        if b == b'+' {
            pluses += 1;
        } else if b == b' ' {
            match data.get(i + 1) {
                Some(b'+') => starts += 1,
                Some(b'-') => return false,
                _ => {}
            }
        }
    }
    starts == tokens && tokens == pluses && data.first() != Some(&b'-')
}

/// The add-only path: every `#` must start `#[0-9a-f]+ ` (the position, stripped), pluses are
/// dropped, and the members are what `str.split()` leaves.
fn additions(data: &[u8], tokens: usize) -> Decoded<'_> {
    let mut members = Vec::with_capacity(tokens);
    let mut bad_position = false;
    let mut non_ascii = false;
    let mut start: Option<usize> = None; // of the member being read
    let mut i = 0;
    while i < data.len() {
        let b = data[i];
        if b == b'#' {
            let digits = data[i + 1..].iter().take_while(|&&d| lower_hex(d)).count();
            if digits == 0 || data.get(i + 1 + digits) != Some(&b' ') {
                bad_position = true;
                break;
            }
            if let Some(s) = start.take() {
                members.push(&data[s..i]);
            }
            i += 1 + digits; // the space after the position ends the member too
            continue;
        }
        if b >= 0x80 {
            non_ascii = true;
        }
        if str_space(b) || b == b'+' {
            // A plus only ever starts a token here (one per token, after a space or first).
            if let Some(s) = start.take() {
                members.push(&data[s..i]);
            }
            if b == b'+' {
                start = Some(i + 1);
            }
        } else if start.is_none() {
            start = Some(i);
        }
        i += 1;
    }
    if bad_position {
        return Decoded::Corrupt(Corrupt::BadPosition);
    }
    if non_ascii {
        return Decoded::Corrupt(Corrupt::NonAscii);
    }
    if let Some(s) = start {
        members.push(&data[s..]);
    }
    members.retain(|m| !m.is_empty());
    Decoded::Members(members, tokens)
}

/// A position as writers write it, or `None` for anything the reference must parse.
fn plain_position(pos: &[u8]) -> Option<u64> {
    if pos.is_empty() || pos.len() > 16 {
        return None;
    }
    let mut value: u64 = 0;
    for &b in pos {
        let digit = (b as char).to_digit(16)?;
        value = (value << 4) | u64::from(digit);
    }
    Some(value)
}

/// `_winners`: per member the greatest position wins; a removal wins a tie.
fn winners<'a>(toks: &[&'a [u8]]) -> Decoded<'a> {
    let mut best: HashMap<&'a [u8], (u64, bool)> = HashMap::with_capacity(toks.len());
    for &tok in toks {
        let add = match tok[0] {
            b'+' => true,
            b'-' => false,
            _ => return Decoded::BadToken(tok),
        };
        let rest = &tok[1..];
        let (member, pos) = match rest.iter().position(|&b| b == b'#') {
            None => (rest, 0),
            Some(at) => match plain_position(&rest[at + 1..]) {
                Some(pos) => (&rest[..at], pos),
                None => return Decoded::Reference,
            },
        };
        let seen = best.entry(member).or_insert((pos, add));
        if pos > seen.0 || (pos == seen.0 && !add) {
            *seen = (pos, add);
        }
    }
    let members: Vec<&[u8]> = best
        .into_iter()
        .filter(|(_, (_, add))| *add)
        .map(|(m, _)| m)
        .collect();
    if members.iter().any(|m| !m.is_ascii()) {
        return Decoded::Corrupt(Corrupt::NonAscii);
    }
    Decoded::Members(members, toks.len())
}

/// `token`'s guard: a member with no byte that could end or split a token (non-empty, printable
/// ASCII, no space, no `#`). The reference refuses anything else with its own error.
pub fn safe_member(member: &[u8]) -> bool {
    !member.is_empty()
        && member
            .iter()
            .all(|&b| (0x21..=0x7e).contains(&b) && b != b'#')
}

/// `token(add, member, pos)` appended to `out`: `+member#pos ` or `-member#pos `, the position
/// in lower-case hex as `%x` writes it.
pub fn write_token(out: &mut Vec<u8>, add: bool, member: &[u8], pos: u64) {
    use std::io::Write;
    out.push(if add { b'+' } else { b'-' });
    out.extend_from_slice(member);
    write!(out, "#{pos:x} ").expect("writing to a Vec cannot fail");
}
