//! `Members`: a sequence of list members (ASCII ids) held as one buffer and the end of each,
//! not as a Python object per member. A follower list decodes into one, and the fan-out cuts
//! it into chunk tasks, writes and reads those, and names timeline keys from it without a
//! `str` per follower; a `str` is made only for a member a caller takes one by one (iterating,
//! indexing), and a `frozenset` once, on the first membership test.

use hashbrown::HashTable;
use pyo3::exceptions::{PyIndexError, PyTypeError};
use pyo3::prelude::*;
use pyo3::pyclass::CompareOp;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyFrozenSet, PyList, PySet, PySlice, PyString, PyTuple};
use std::hash::BuildHasher;

#[pyclass(frozen, module = "timeline_fanout._native", sequence)]
pub struct Members {
    data: Vec<u8>,
    ends: Vec<u32>,
    /// Each member once (a list's set, or part of one): compared with other distinct `Members`
    /// as the set they are, where any other `Members` (a task's followers) compare as sequences.
    distinct: bool,
    set: PyOnceLock<Py<PyFrozenSet>>,
}

impl Members {
    /// The members in order, each at most once (the first occurrence kept): a list's set.
    /// `None` past 4 GiB of members (the caller's reference answers such a list).
    pub fn distinct<'a>(members: impl ExactSizeIterator<Item = &'a [u8]>) -> Option<Members> {
        // The members seen, as their indices here (4 bytes each, not a 16-byte slice: a
        // million-member list's table stays small enough for the caches it is probed in).
        let mut seen: HashTable<u32> = HashTable::with_capacity(members.len());
        let hasher = hashbrown::DefaultHashBuilder::default();
        let mut kept = Members::of(std::iter::empty(), true)?;
        kept.ends.reserve(members.len());
        for member in members {
            let hash = hasher.hash_one(member);
            let found = seen.find(hash, |&i| kept.get(i as usize) == member);
            if found.is_none() {
                let at = u32::try_from(kept.len()).ok()?;
                kept.data.extend_from_slice(member);
                kept.ends.push(u32::try_from(kept.data.len()).ok()?);
                seen.insert_unique(hash, at, |&i| hasher.hash_one(kept.get(i as usize)));
            }
        }
        Some(kept)
    }

    /// The members in order, repeats kept (the caller says whether there are none); `None`
    /// past 4 GiB.
    pub fn of<'a>(members: impl Iterator<Item = &'a [u8]>, distinct: bool) -> Option<Members> {
        let mut data = Vec::new();
        let mut ends = Vec::with_capacity(members.size_hint().0);
        for member in members {
            data.extend_from_slice(member);
            ends.push(u32::try_from(data.len()).ok()?);
        }
        Some(Members {
            data,
            ends,
            distinct,
            set: PyOnceLock::new(),
        })
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.data[start..self.ends[i] as usize]
    }

    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.len()).map(|i| self.get(i))
    }

    fn text(&self, i: usize) -> &str {
        // Built only from ASCII: a decoded list's members, a task's ids.
        std::str::from_utf8(self.get(i)).expect("members are ASCII")
    }

    fn string<'py>(&self, py: Python<'py>, i: usize) -> Bound<'py, PyString> {
        PyString::new(py, self.text(i))
    }

    /// A set operation of the frozenset (the members' own, built once) with `other`.
    fn set_op(&self, py: Python<'_>, other: &Bound<'_, PyAny>, name: &str) -> PyResult<Py<PyAny>> {
        let other = match other.cast::<Members>() {
            Ok(members) => members.get().frozen(py)?.into_bound(py).into_any(),
            Err(_) => other.clone(),
        };
        Ok(self
            .frozen(py)?
            .bind(py)
            .call_method1(name, (other,))?
            .unbind())
    }

    fn index(&self, at: isize) -> PyResult<usize> {
        let len = self.len() as isize;
        let at = if at < 0 { at + len } else { at };
        if (0..len).contains(&at) {
            Ok(at as usize)
        } else {
            Err(PyIndexError::new_err("Members index out of range"))
        }
    }
}

#[pymethods]
impl Members {
    fn __len__(&self) -> usize {
        self.len()
    }

    /// A member as a `str`, or a slice as `Members`.
    fn __getitem__<'py>(&self, py: Python<'py>, at: &Bound<'py, PyAny>) -> PyResult<Py<PyAny>> {
        if let Ok(slice) = at.cast::<PySlice>() {
            let range = slice.indices(self.len() as isize)?;
            let picked = (0..range.slicelength)
                .map(|k| self.get((range.start + k as isize * range.step) as usize));
            let members =
                Members::of(picked, self.distinct).expect("a slice is no larger than its whole");
            return Ok(Py::new(py, members)?.into_any());
        }
        let Ok(at) = at.extract::<isize>() else {
            return Err(PyTypeError::new_err(
                "Members indices must be integers or slices",
            ));
        };
        Ok(self.string(py, self.index(at)?).into_any().unbind())
    }

    fn __iter__(slf: Bound<'_, Self>) -> MembersIter {
        MembersIter {
            members: slf.unbind(),
            at: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Through the members' `frozenset`, built on the first test and kept.
    fn __contains__(&self, py: Python<'_>, member: &Bound<'_, PyAny>) -> PyResult<bool> {
        self.frozen(py)?.bind(py).contains(member)
    }

    /// The members as a `frozenset` of `str` (built once).
    fn frozen(&self, py: Python<'_>) -> PyResult<Py<PyFrozenSet>> {
        self.set
            .get_or_try_init(py, || {
                let strings = (0..self.len()).map(|i| self.string(py, i));
                PyFrozenSet::new(py, strings).map(Bound::unbind)
            })
            .map(|set| set.clone_ref(py))
    }

    /// Compared with `Members`, the same members in the same order (as sets where both are
    /// distinct: two decodes of one list); with a `list` or `tuple`,
    /// as the list of the members' `str`s (a chunk task's followers compare with either); with
    /// a `set` or `frozenset`, as the set of them, order comparisons (subsets) included.
    fn __richcmp__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
        op: CompareOp,
    ) -> PyResult<Py<PyAny>> {
        let answer = |same: bool| Ok(PyBool::new(py, same).to_owned().into_any().unbind());
        let equal = match op {
            CompareOp::Eq => Some(true),
            CompareOp::Ne => Some(false),
            _ => None,
        };
        let sequence = other
            .cast::<Members>()
            .is_ok_and(|other| !(self.distinct && other.get().distinct))
            && equal.is_some();
        if let Some(set) = as_set(py, other)?.filter(|_| !sequence) {
            return Ok(self.frozen(py)?.bind(py).rich_compare(set, op)?.unbind());
        }
        let Some(equal) = equal else {
            return Ok(py.NotImplemented());
        };
        if let Ok(other) = other.cast::<Members>() {
            let other = other.get();
            return answer((self.ends == other.ends && self.data == other.data) == equal);
        }
        let items = if let Ok(list) = other.cast::<PyList>() {
            list.iter().collect::<Vec<_>>()
        } else if let Ok(tuple) = other.cast::<PyTuple>() {
            tuple.iter().collect::<Vec<_>>()
        } else {
            return Ok(py.NotImplemented());
        };
        let same = items.len() == self.len()
            && items.iter().enumerate().all(|(i, item)| {
                item.cast::<PyString>()
                    .is_ok_and(|text| text.to_str().ok() == Some(self.text(i)))
            });
        answer(same == equal)
    }

    fn __and__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.set_op(py, other, "__and__")
    }

    fn __rand__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.set_op(py, other, "__rand__")
    }

    fn __or__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.set_op(py, other, "__or__")
    }

    fn __ror__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.set_op(py, other, "__ror__")
    }

    fn __sub__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.set_op(py, other, "__sub__")
    }

    fn __rsub__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.set_op(py, other, "__rsub__")
    }

    fn __xor__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.set_op(py, other, "__xor__")
    }

    fn __rxor__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.set_op(py, other, "__rxor__")
    }

    fn isdisjoint(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        let other = as_set(py, other)?.unwrap_or_else(|| other.clone());
        self.frozen(py)?
            .bind(py)
            .call_method1("isdisjoint", (other,))?
            .extract()
    }
    fn __repr__(&self) -> String {
        let shown: Vec<String> = (0..self.len().min(5))
            .map(|i| format!("{:?}", self.text(i)))
            .collect();
        let more = if self.len() > 5 { ", ..." } else { "" };
        format!("Members([{}{more}], len={})", shown.join(", "), self.len())
    }
}

/// `other` as a set when it is one: a `set` or `frozenset` itself, `Members` as theirs.
fn as_set<'py>(py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
    if let Ok(members) = other.cast::<Members>() {
        return Ok(Some(members.get().frozen(py)?.into_bound(py).into_any()));
    }
    let is_set = other.cast::<PyFrozenSet>().is_ok() || other.cast::<PySet>().is_ok();
    Ok(is_set.then(|| other.clone()))
}

/// Iterating `Members`: a `str` per member, in order.
#[pyclass(frozen, module = "timeline_fanout._native")]
pub struct MembersIter {
    members: Py<Members>,
    at: std::sync::atomic::AtomicUsize,
}

#[pymethods]
impl MembersIter {
    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyString>> {
        let members = self.members.get();
        let at = self.at.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        (at < members.len()).then(|| members.string(py, at))
    }
}
