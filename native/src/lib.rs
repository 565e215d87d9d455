//! The per-member work of the hot paths, at native speed, behind the interfaces of the Python
//! modules that keep the reference implementations (timeline_fanout/graph/lists/tokens.py,
//! timeline_fanout/graph/model/keys.py). Each function here has one meaning, the reference's:
//! where its input leaves the form our writers produce (a position that is not plain hex of at
//! most 16 digits, an id that is not a `str`), it answers `None` and the caller runs the
//! reference, so that every result and every error stays the reference's own.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyFrozenSet, PyList, PyString};

mod tokens;

/// `tokens.decode` of the shards joined by a space: `(members, tokens)`, or `None` where the
/// reference must decide (see the module's doc). A `ValueError` carries the reference's message
/// for a corrupt list.
#[pyfunction]
fn decode_list<'py>(
    py: Python<'py>,
    chunks: Vec<Bound<'py, PyBytes>>,
) -> PyResult<Option<(Bound<'py, PyFrozenSet>, usize)>> {
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
    // Every member is ASCII (checked by `decode`): a `str` straight from its bytes.
    let strings = members
        .iter()
        .map(|m| PyString::new(py, unsafe { std::str::from_utf8_unchecked(m) }));
    Ok(Some((PyFrozenSet::new(py, strings)?, count)))
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
    for user in users.try_iter()? {
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

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decode_list, m)?)?;
    m.add_function(wrap_pyfunction!(user_keys, m)?)?;
    Ok(())
}
