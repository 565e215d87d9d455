//! The per-member work of the hot paths, at native speed, behind the interfaces of the Python
//! modules that keep the reference implementations (timeline_fanout/graph/lists/tokens.py,
//! timeline_fanout/graph/model/keys.py, timeline_fanout/schemas/codec.py). Each function here
//! has one meaning, the reference's: where its input leaves the form our writers produce (a
//! position that is not plain hex of at most 16 digits, an id that is not a `str`, a task not
//! in the publisher's form), it answers `None` and the caller runs the reference, so that every
//! result and every error stays the reference's own.

use hashbrown::HashMap;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyList, PyString, PyTuple, PyType};

mod members;
mod meta;
mod tasks;
mod tokens;

use members::{Buffer, MemberList, Members};

/// Servers a batch is split over here, at most (a count past it is the reference's).
const SERVERS_LIMIT: u64 = 1 << 16;

/// `wire.NOT_READ`: the time to live of an item read without it.
const NOT_READ: i64 = -2;

/// `tokens.decode` of the shards joined by a space (`tokens.decode_ids` with `ids`: a member
/// that is not a user id makes the list corrupt): `(members, tokens)`, the members as
/// `Members` (each once, no `str` made), or `None` where the reference must decide (see the
/// module's doc; shards that are no exact list of exact `bytes` among them). A `ValueError`
/// carries the reference's message for a corrupt list.
#[pyfunction]
fn decode_list<'py>(
    py: Python<'py>,
    chunks: &Bound<'py, PyAny>,
    ids: bool,
) -> PyResult<Option<(Bound<'py, Members>, usize)>> {
    let Ok(chunks) = chunks.cast_exact::<PyList>() else {
        return Ok(None);
    };
    let Some(chunks) = chunks
        .iter()
        .map(|c| c.cast_into_exact::<PyBytes>().ok())
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(None);
    };
    let mut data = Vec::with_capacity(chunks.iter().map(|c| c.as_bytes().len() + 1).sum());
    for (i, chunk) in chunks.iter().enumerate() {
        if i > 0 {
            data.push(b' ');
        }
        data.extend_from_slice(chunk.as_bytes());
    }
    let decoded = match tokens::decode(&data) {
        tokens::Decoded::Members(members, count) => (members, count),
        tokens::Decoded::Reference => return Ok(None),
        tokens::Decoded::Corrupt(reason) => return Err(PyValueError::new_err(reason.message())),
        tokens::Decoded::BadToken(tok) => {
            let shown = PyBytes::new(py, &tok[..tok.len().min(70)]).repr()?;
            return Err(PyValueError::new_err(format!("bad token {shown}")));
        }
    };
    let (members, count) = decoded;
    if ids && !members.iter().all(|m| tokens::valid_id(m)) {
        return Err(PyValueError::new_err(tokens::NOT_AN_ID));
    }
    // Every member is ASCII (checked by `decode`).
    let Some(members) = Buffer::distinct(members.into_iter()) else {
        return Ok(None);
    };
    Ok(Some((Bound::new(py, Members::new(members))?, count)))
}

/// `KeySpace._user_keys`: `prefix + user` as bytes for every user, or `None` when any user is
/// not a valid id (or not a `str`): the reference then raises its own error.
#[pyfunction]
fn user_keys<'py>(
    py: Python<'py>,
    prefix: &str,
    users: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyList>>> {
    let mut keys: Vec<Bound<'py, PyBytes>> = Vec::with_capacity(users.len().unwrap_or(0));
    let mut key = Vec::with_capacity(prefix.len() + 64);
    let buffer = match (users.cast::<MemberList>(), users.cast::<Members>()) {
        (Ok(list), _) => Some(list.get().buffer()),
        (_, Ok(set)) => Some(set.get().buffer()),
        _ => None,
    };
    if let Some(buffer) = buffer {
        for user in buffer.iter() {
            if !tokens::valid_id(user) {
                return Ok(None);
            }
            key.clear();
            key.extend_from_slice(prefix.as_bytes());
            key.extend_from_slice(user);
            keys.push(PyBytes::new(py, &key));
        }
        return Ok(Some(PyList::new(py, keys)?));
    }
    let Ok(users) = users.try_iter() else {
        return Ok(None);
    };
    for user in users {
        let user = user?;
        let Ok(user) = user.cast::<PyString>() else {
            return Ok(None);
        };
        let Ok(text) = user.to_str() else {
            return Ok(None);
        };
        if !tokens::valid_id(text.as_bytes()) {
            return Ok(None);
        }
        key.clear();
        key.extend_from_slice(prefix.as_bytes());
        key.extend_from_slice(text.as_bytes());
        keys.push(PyBytes::new(py, &key));
    }
    Ok(Some(PyList::new(py, keys)?))
}

/// An exact `str` that is a valid id (a subclass or anything else: the reference decides).
fn id_of<'a>(value: &'a Bound<'_, PyAny>) -> Option<&'a str> {
    let text = value.cast_exact::<PyString>().ok()?.to_str().ok()?;
    tokens::valid_id(text.as_bytes()).then_some(text)
}

/// An exact `int` (not a `bool`) below `limit`, or `None`.
fn int_below(value: &Bound<'_, PyAny>, limit: u64) -> Option<u64> {
    let int = value.cast_exact::<PyInt>().ok()?;
    int.extract::<u64>().ok().filter(|v| *v < limit)
}

/// A task's followers as given: a `MemberList` or an exact list of exact `str`s.
enum Followers<'py> {
    Members(Bound<'py, MemberList>),
    Strings(Vec<Bound<'py, PyString>>),
}

impl Followers<'_> {
    /// Each follower's text, when every one is a valid id and there are at most `MAX_CHUNK`.
    fn ids(&self) -> Option<Vec<&str>> {
        let ids: Vec<&str> = match self {
            Followers::Members(members) => members
                .get()
                .buffer()
                .iter()
                .map(|m| std::str::from_utf8(m).ok())
                .collect::<Option<_>>()?,
            Followers::Strings(strings) => strings
                .iter()
                .map(|s| s.to_str().ok())
                .collect::<Option<_>>()?,
        };
        let valid =
            ids.len() <= tasks::MAX_CHUNK && ids.iter().all(|id| tokens::valid_id(id.as_bytes()));
        valid.then_some(ids)
    }
}

/// The followers of a task when they are a `MemberList` or an exact list of exact `str`s.
fn followers_of<'py>(followers: &Bound<'py, PyAny>) -> Option<Followers<'py>> {
    if let Ok(members) = followers.cast_exact::<MemberList>() {
        return Some(Followers::Members(members.clone()));
    }
    let list = followers.cast_exact::<PyList>().ok()?;
    if list.len() > tasks::MAX_CHUNK {
        return None;
    }
    let strings = list
        .iter()
        .map(|item| item.cast_into_exact::<PyString>().ok())
        .collect::<Option<_>>()?;
    Some(Followers::Strings(strings))
}

/// Whether a chunk task of these fields passes every rule of the model (then it is built
/// without validating again); `False` leaves the model to validate, and to refuse.
#[pyfunction]
fn valid_fanout_task(
    author: &Bound<'_, PyAny>,
    post_id: &Bound<'_, PyAny>,
    post_ts: &Bound<'_, PyAny>,
    chunk: &Bound<'_, PyAny>,
    followers: &Bound<'_, PyAny>,
) -> bool {
    id_of(author).is_some()
        && id_of(post_id).is_some()
        && int_below(post_ts, tasks::MILLIS_LIMIT).is_some()
        && int_below(chunk, u64::MAX).is_some()
        && followers_of(followers).is_some_and(|f| f.ids().is_some())
}

/// The wire form of a chunk task with its envelope, byte for byte what the reference writes;
/// `None` for fields outside the plain form (the reference writes those).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn write_fanout_task<'py>(
    py: Python<'py>,
    event_id: &Bound<'py, PyAny>,
    ts: &Bound<'py, PyAny>,
    v: &Bound<'py, PyAny>,
    author: &Bound<'py, PyAny>,
    post_id: &Bound<'py, PyAny>,
    post_ts: &Bound<'py, PyAny>,
    chunk: &Bound<'py, PyAny>,
    followers: &Bound<'py, PyAny>,
) -> Option<Bound<'py, PyBytes>> {
    let event_id = event_id.cast_exact::<PyString>().ok()?.to_str().ok()?;
    if !tasks::plain_event_id(event_id.as_bytes()) || int_below(v, 2)? != 1 {
        return None;
    }
    let (author, post_id) = (id_of(author)?, id_of(post_id)?);
    let given = followers_of(followers)?;
    let followers = given.ids()?;
    let task = tasks::Task {
        event_id,
        ts: int_below(ts, u64::MAX)?,
        author,
        post_id,
        post_ts: int_below(post_ts, u64::MAX)?,
        chunk: int_below(chunk, u64::MAX)?,
        followers,
    };
    Some(PyBytes::new(py, &tasks::write(&task)))
}

type TaskFields<'py> = (
    String,
    u64,
    String,
    String,
    u64,
    u64,
    Bound<'py, MemberList>,
);

/// A chunk task's fields from a payload in the publisher's form with every rule met:
/// `(event_id, ts, author, post_id, post_ts, chunk, followers)`, the followers as a
/// `MemberList` (in order, repeats kept); `None` for any other payload.
#[pyfunction]
fn read_fanout_task<'py>(py: Python<'py>, payload: &[u8]) -> PyResult<Option<TaskFields<'py>>> {
    let Some(task) = tasks::read(payload) else {
        return Ok(None);
    };
    let members = Buffer::of(task.followers.iter().map(|f| f.as_bytes()));
    let followers = Bound::new(
        py,
        MemberList::new(members.expect("a task is far below 4 GiB")),
    )?;
    Ok(Some((
        task.event_id.to_owned(),
        task.ts,
        task.author.to_owned(),
        task.post_id.to_owned(),
        task.post_ts,
        task.chunk,
        followers,
    )))
}

/// `wire.take_values`: the meta get replies at `buf[pos..]` onto `found` (an `item`, a tuple
/// subclass, per hit; `None` per miss) until it holds `count`, answering `(pos, need)` as the
/// reference does. `need` is -1 where the reply at `pos` is not in memcached's own form, or
/// `buf` is no exact `bytes`, `found` no exact `list` or `pos` outside `buf`: the reference
/// takes it from there, or raises its own error.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn take_values<'py>(
    py: Python<'py>,
    buf: &Bound<'py, PyAny>,
    pos: i64,
    count: i64,
    found: &Bound<'py, PyAny>,
    writable: &Bound<'py, PyAny>,
    stamp: &[u8],
    item: &Bound<'py, PyType>,
) -> PyResult<(i64, i64)> {
    let (Ok(buf), Ok(found)) = (buf.cast_exact::<PyBytes>(), found.cast_exact::<PyList>()) else {
        return Ok((pos, -1));
    };
    let data = buf.as_bytes();
    let Some(mut at) = usize::try_from(pos).ok().filter(|at| *at <= data.len()) else {
        return Ok((pos, -1));
    };
    let writable = writable.is_truthy()?;
    // `tuple.__new__(item, fields)`: the reference's C-level construction of a named tuple.
    let new = py.get_type::<PyTuple>().getattr("__new__")?;
    let mut cas = Vec::new();
    while (found.len() as i64) < count {
        let next = match meta::next_reply(data, at, writable) {
            meta::Step::Reference => return Ok((at as i64, -1)),
            meta::Step::Need(need) => return Ok((at as i64, need as i64)),
            meta::Step::Taken(meta::Reply::Miss, next) => {
                found.append(py.None())?;
                next
            }
            meta::Step::Taken(
                meta::Reply::Hit {
                    value,
                    cas: id,
                    ttl,
                },
                next,
            ) => {
                cas.clear();
                if ttl.is_some() {
                    cas.extend_from_slice(id);
                    cas.extend_from_slice(stamp);
                }
                let fields = (
                    PyBytes::new(py, value),
                    PyBytes::new(py, &cas),
                    ttl.unwrap_or(NOT_READ),
                );
                found.append(new.call1((item, fields))?)?;
                next
            }
        };
        at = next;
    }
    Ok((at as i64, 0))
}

/// `KeySpace.families`: the key each key is placed by, the key itself where it is its own
/// family (no copy); `None` unless the keys are an exact list of exact `bytes` (the
/// reference answers anything else).
#[pyfunction]
fn families<'py>(
    py: Python<'py>,
    keys: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyList>>> {
    let Ok(keys) = keys.cast_exact::<PyList>() else {
        return Ok(None);
    };
    let mut found: Vec<Bound<'py, PyAny>> = Vec::with_capacity(keys.len());
    for key in keys.iter() {
        let Ok(bytes) = key.cast_exact::<PyBytes>() else {
            return Ok(None);
        };
        let whole = bytes.as_bytes();
        let family = meta::family(whole);
        if family.len() == whole.len() {
            found.push(key.clone());
        } else {
            found.push(PyBytes::new(py, family).into_any());
        }
    }
    PyList::new(py, found).map(Some)
}

/// `ring.winners`: each family's owner as an index into the sorted nodes whose `{node}-`
/// prefixes are given; `None` unless there are nodes and the families are an exact list of
/// exact `bytes` (the reference places anything else, or refuses it).
#[pyfunction]
fn winners<'py>(
    py: Python<'py>,
    prefixes: Vec<Vec<u8>>,
    keys: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyList>>> {
    placed(py, &prefixes, keys, |family| family)
}

/// `ring.place` under `ring.leading_parts`: each key's owner, found from its family without
/// making that family (`KeySpace.families` then `winners` in one pass); `None` where
/// `winners` would answer it.
#[pyfunction]
fn place<'py>(
    py: Python<'py>,
    prefixes: Vec<Vec<u8>>,
    keys: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyList>>> {
    placed(py, &prefixes, keys, meta::family)
}

/// The owner of the family `family_of` finds in each key, for `winners` and `place`.
fn placed<'py>(
    py: Python<'py>,
    prefixes: &[Vec<u8>],
    keys: &Bound<'py, PyAny>,
    family_of: fn(&[u8]) -> &[u8],
) -> PyResult<Option<Bound<'py, PyList>>> {
    let Ok(keys) = keys.cast_exact::<PyList>() else {
        return Ok(None);
    };
    if prefixes.is_empty() {
        return Ok(None);
    }
    let seeds: Vec<meta::Seed> = prefixes.iter().map(|p| meta::Seed::new(p)).collect();
    let mut owners = Vec::with_capacity(keys.len());
    let mut scratch = Vec::with_capacity(64);
    for key in keys.iter() {
        let Ok(key) = key.cast_exact::<PyBytes>() else {
            return Ok(None);
        };
        owners.push(meta::winner(
            &seeds,
            family_of(key.as_bytes()),
            &mut scratch,
        ));
    }
    PyList::new(py, owners).map(Some)
}

/// `executor.by_owner`: `column` split by `owners` (each entry's server, as an index) into
/// `count` lists, each in the column's order; an entry whose owner is no index below `count`
/// (`ring.MOVED`) goes to none. `None` unless both are exact lists, every owner an exact
/// `int` and `count` one below `SERVERS_LIMIT`: the reference splits anything else.
#[pyfunction]
fn by_owner<'py>(
    py: Python<'py>,
    owners: &Bound<'py, PyAny>,
    count: &Bound<'py, PyAny>,
    column: &Bound<'py, PyAny>,
) -> PyResult<Option<Vec<Bound<'py, PyList>>>> {
    let (Ok(owners), Ok(column)) = (owners.cast_exact::<PyList>(), column.cast_exact::<PyList>())
    else {
        return Ok(None);
    };
    let Some(count) = int_below(count, SERVERS_LIMIT).map(|c| c as usize) else {
        return Ok(None);
    };
    let each = owners.len() / count.max(1) + 1;
    let mut split: Vec<Vec<Bound<'py, PyAny>>> =
        (0..count).map(|_| Vec::with_capacity(each)).collect();
    for (owner, entry) in owners.iter().zip(column.iter()) {
        let Ok(owner) = owner.cast_exact::<PyInt>() else {
            return Ok(None);
        };
        let at = owner
            .extract::<i64>()
            .ok()
            .and_then(|at| usize::try_from(at).ok());
        if let Some(mine) = at.and_then(|at| split.get_mut(at)) {
            mine.push(entry);
        }
    }
    split
        .into_iter()
        .map(|entries| PyList::new(py, entries))
        .collect::<PyResult<Vec<_>>>()
        .map(Some)
}

/// One list's tokens: the user the list belongs to, and its tokens.
struct Group<'a, 'py> {
    user: &'a Bound<'py, PyString>,
    tokens: Vec<u8>,
}

/// Each follower list's tokens (`by_followee`) or each following list's, in the order their
/// users first appear, each list's tokens in the changes' order.
fn grouped<'a, 'py>(changes: &'a [EdgeFields<'a, 'py>], by_followee: bool) -> Vec<Group<'a, 'py>> {
    let mut at: HashMap<&[u8], usize> = HashMap::with_capacity(changes.len());
    let mut groups: Vec<Group<'a, 'py>> = Vec::new();
    for change in changes {
        let (owner, owner_text, member) = if by_followee {
            (change.followee, change.followee_text, change.follower_text)
        } else {
            (change.follower, change.follower_text, change.followee_text)
        };
        let index = *at.entry(owner_text).or_insert_with(|| {
            groups.push(Group {
                user: owner,
                tokens: Vec::new(),
            });
            groups.len() - 1
        });
        tokens::write_token(&mut groups[index].tokens, change.active, member, change.pos);
    }
    groups
}

/// An edge change's fields as the token encoding reads them.
struct EdgeFields<'a, 'py> {
    follower: &'a Bound<'py, PyString>,
    followee: &'a Bound<'py, PyString>,
    follower_text: &'a [u8],
    followee_text: &'a [u8],
    active: bool,
    pos: u64,
}

/// `tokens.edge_tokens_reference`: every change's token on its followee's follower list and on
/// its follower's following list, `{ListRef(kind, user): tokens}`, follower lists first, each
/// kind's lists in the order their users first appear and each list's tokens in the changes'
/// order. `None` unless `changes` is an exact list of `edge_change` tuples whose ids are exact
/// `str`s that `token` accepts, each `active` an exact `bool` and each `pos` an exact `int` in
/// 0..2**64: the reference encodes anything else, or refuses it with its own error.
#[pyfunction]
fn edge_tokens<'py>(
    py: Python<'py>,
    changes: &Bound<'py, PyAny>,
    edge_change: &Bound<'py, PyType>,
    list_ref: &Bound<'py, PyType>,
    followers_kind: &Bound<'py, PyAny>,
    following_kind: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Ok(changes) = changes.cast_exact::<PyList>() else {
        return Ok(None);
    };
    let mut fields: Vec<(Bound<'py, PyString>, Bound<'py, PyString>, bool, u64)> =
        Vec::with_capacity(changes.len());
    for change in changes.iter() {
        if !change.get_type().is(edge_change) {
            return Ok(None);
        }
        let Some(change) = change.cast_into::<PyTuple>().ok().filter(|c| c.len() >= 4) else {
            return Ok(None);
        };
        let (Ok(follower), Ok(followee)) = (
            change.get_item(0)?.cast_into_exact::<PyString>(),
            change.get_item(1)?.cast_into_exact::<PyString>(),
        ) else {
            return Ok(None);
        };
        let Ok(active) = change.get_item(2)?.cast_into_exact::<PyBool>() else {
            return Ok(None);
        };
        let pos = change.get_item(3)?;
        let Some(pos) = pos
            .cast_exact::<PyInt>()
            .ok()
            .and_then(|p| p.extract::<u64>().ok())
        else {
            return Ok(None);
        };
        fields.push((follower, followee, active.is_true(), pos));
    }
    let mut edges: Vec<EdgeFields<'_, 'py>> = Vec::with_capacity(fields.len());
    for (follower, followee, active, pos) in &fields {
        let (Ok(follower_text), Ok(followee_text)) = (follower.to_str(), followee.to_str()) else {
            return Ok(None);
        };
        let (follower_text, followee_text) = (follower_text.as_bytes(), followee_text.as_bytes());
        if !tokens::safe_member(follower_text) || !tokens::safe_member(followee_text) {
            return Ok(None);
        }
        edges.push(EdgeFields {
            follower,
            followee,
            follower_text,
            followee_text,
            active: *active,
            pos: *pos,
        });
    }
    let followers = grouped(&edges, true);
    let following = grouped(&edges, false);
    // `tuple.__new__(list_ref, (kind, user))`: the reference's C-level named tuple.
    let new = py.get_type::<PyTuple>().getattr("__new__")?;
    let out = PyDict::new(py);
    for (kind, groups) in [(followers_kind, followers), (following_kind, following)] {
        for group in groups {
            let key = new.call1((list_ref, (kind, group.user)))?;
            out.set_item(key, PyBytes::new(py, &group.tokens))?;
        }
    }
    Ok(Some(out))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Members>()?;
    m.add_class::<MemberList>()?;
    m.add_function(wrap_pyfunction!(decode_list, m)?)?;
    m.add_function(wrap_pyfunction!(user_keys, m)?)?;
    m.add_function(wrap_pyfunction!(valid_fanout_task, m)?)?;
    m.add_function(wrap_pyfunction!(write_fanout_task, m)?)?;
    m.add_function(wrap_pyfunction!(read_fanout_task, m)?)?;
    m.add_function(wrap_pyfunction!(take_values, m)?)?;
    m.add_function(wrap_pyfunction!(by_owner, m)?)?;
    m.add_function(wrap_pyfunction!(winners, m)?)?;
    m.add_function(wrap_pyfunction!(place, m)?)?;
    m.add_function(wrap_pyfunction!(families, m)?)?;
    m.add_function(wrap_pyfunction!(edge_tokens, m)?)?;
    Ok(())
}
