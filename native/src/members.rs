//! A list's members held as one buffer and the end of each, not as a Python object per member,
//! in the two roles the reference gives them: `Members`, a list's set as its decode answers it
//! (the reference's `frozenset` of `str`), and `MemberList`, members in order with repeats kept
//! as they are passed on (the reference's `list` of `str`: a set put in order, its parts, a
//! chunk task's followers). A follower list decodes into `Members`; the fan-out puts it in
//! order, cuts it into chunk tasks, writes and reads those, and names timeline keys from it
//! without a `str` per follower. A `str` is made only for a member a caller takes one by one
//! (iterating, indexing), and a `frozenset` once, on the first membership test or set
//! operation. Each type behaves as its reference type does: against the other type, or a
//! container of another kind, it compares as the reference does (not equal, or unordered).

use hashbrown::HashTable;
use pyo3::exceptions::{PyAttributeError, PyIndexError, PyTypeError};
use pyo3::prelude::*;
use pyo3::pyclass::CompareOp;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyFrozenSet, PyInt, PyList, PySet, PySlice, PyString, PyTuple, PyType};
use std::hash::BuildHasher;

/// The named methods of a `frozenset` that `Members` answer as theirs.
const SET_METHODS: [&str; 7] = [
    "union",
    "intersection",
    "difference",
    "symmetric_difference",
    "issubset",
    "issuperset",
    "isdisjoint",
];

/// The members' bytes and where each ends.
pub struct Buffer {
    data: Vec<u8>,
    ends: Vec<u32>,
}

impl Buffer {
    /// The members in order, each at most once (the first occurrence kept): a list's set.
    /// `None` past 4 GiB of members (the caller's reference answers such a list).
    pub fn distinct<'a>(members: impl Iterator<Item = &'a [u8]>) -> Option<Buffer> {
        // The members seen, as their indices here (4 bytes each, not a 16-byte slice: a
        // million-member list's table stays small enough for the caches it is probed in).
        let mut seen: HashTable<u32> = HashTable::with_capacity(members.size_hint().0);
        let hasher = hashbrown::DefaultHashBuilder::default();
        let mut kept = Buffer::of(std::iter::empty())?;
        kept.ends.reserve(members.size_hint().0);
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

    /// The members in order, repeats kept; `None` past 4 GiB.
    pub fn of<'a>(members: impl Iterator<Item = &'a [u8]>) -> Option<Buffer> {
        let mut data = Vec::new();
        let mut ends = Vec::with_capacity(members.size_hint().0);
        for member in members {
            data.extend_from_slice(member);
            ends.push(u32::try_from(data.len()).ok()?);
        }
        Some(Buffer { data, ends })
    }

    /// The `str`s of an iterable (a model rebuilding a sequence, or unpickling), as UTF-8.
    fn from_strs(
        members: Option<&Bound<'_, PyAny>>,
        build: fn(std::vec::IntoIter<&[u8]>) -> Option<Buffer>,
    ) -> PyResult<Buffer> {
        let mut texts: Vec<Bound<'_, PyString>> = Vec::new();
        if let Some(members) = members {
            for member in members.try_iter()? {
                texts.push(member?.cast_into::<PyString>().map_err(PyErr::from)?);
            }
        }
        let bytes = texts
            .iter()
            .map(|t| t.to_str().map(str::as_bytes))
            .collect::<PyResult<Vec<_>>>()?;
        build(bytes.into_iter()).ok_or_else(|| PyTypeError::new_err("members past 4 GiB"))
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
        // Built only from `str`s: a decoded list's members and a task's ids are ASCII, and a
        // rebuilt sequence is UTF-8.
        std::str::from_utf8(self.get(i)).expect("members are UTF-8")
    }

    fn string<'py>(&self, py: Python<'py>, i: usize) -> Bound<'py, PyString> {
        PyString::new(py, self.text(i))
    }

    fn list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, (0..self.len()).map(|i| self.string(py, i)))
    }

    /// The members' `frozenset`, built on the first call and kept in `cell`.
    fn frozen(
        &self,
        py: Python<'_>,
        cell: &PyOnceLock<Py<PyFrozenSet>>,
    ) -> PyResult<Py<PyFrozenSet>> {
        cell.get_or_try_init(py, || {
            PyFrozenSet::new(py, (0..self.len()).map(|i| self.string(py, i))).map(Bound::unbind)
        })
        .map(|set| set.clone_ref(py))
    }

    fn repr(&self, name: &str) -> String {
        let shown: Vec<String> = (0..self.len().min(5))
            .map(|i| format!("{:?}", self.text(i)))
            .collect();
        let more = if self.len() > 5 { ", ..." } else { "" };
        format!("{name}([{}{more}], len={})", shown.join(", "), self.len())
    }
}

/// A list's set as its decode answers it: each member once, in decode order; a `frozenset` of
/// `str` to every caller (compared, hashed, combined and tested as that `frozenset`).
#[pyclass(frozen, weakref, module = "timeline_fanout._native")]
pub struct Members {
    buf: Buffer,
    set: PyOnceLock<Py<PyFrozenSet>>,
}

impl Members {
    pub fn new(buf: Buffer) -> Members {
        Members {
            buf,
            set: PyOnceLock::new(),
        }
    }

    pub fn buffer(&self) -> &Buffer {
        &self.buf
    }

    fn frozen_set<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyFrozenSet>> {
        Ok(self.buf.frozen(py, &self.set)?.into_bound(py))
    }

    /// A set operator: the frozenset's, which answers `NotImplemented` for anything not a set.
    fn set_op(&self, py: Python<'_>, other: &Bound<'_, PyAny>, name: &str) -> PyResult<Py<PyAny>> {
        let other = as_set(py, other)?.unwrap_or_else(|| other.clone());
        Ok(self.frozen_set(py)?.call_method1(name, (other,))?.unbind())
    }
}

#[pymethods]
impl Members {
    /// The members of an iterable of `str`, each once.
    #[new]
    #[pyo3(signature = (members = None))]
    fn py_new(members: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        Ok(Members::new(Buffer::from_strs(members, |m| {
            Buffer::distinct(m)
        })?))
    }

    fn __len__(&self) -> usize {
        self.buf.len()
    }

    fn __iter__(slf: Bound<'_, Self>) -> MembersIter {
        MembersIter {
            owner: Owner::Set(slf.unbind()),
            at: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// As the `frozenset` tests it (`in`, which tests a `set` as its `frozenset`).
    fn __contains__(&self, py: Python<'_>, member: &Bound<'_, PyAny>) -> PyResult<bool> {
        self.frozen_set(py)?.as_any().contains(member)
    }

    /// The members as a `frozenset` of `str` (built once).
    fn frozen(&self, py: Python<'_>) -> PyResult<Py<PyFrozenSet>> {
        self.buf.frozen(py, &self.set)
    }

    /// The members in decode order as a `MemberList` (a set put in order, to cut into parts).
    fn in_order(&self) -> MemberList {
        MemberList::new(Buffer {
            data: self.buf.data.clone(),
            ends: self.buf.ends.clone(),
        })
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        self.frozen_set(py)?.hash()
    }

    /// As the frozenset compares (other `Members` as theirs): with anything, by Python's own
    /// comparison of it (a `dict`'s keys equal to it, a list not, a list unordered with it).
    fn __richcmp__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
        op: CompareOp,
    ) -> PyResult<Py<PyAny>> {
        let other = as_set(py, other)?.unwrap_or_else(|| other.clone());
        Ok(self.frozen_set(py)?.rich_compare(other, op)?.unbind())
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

    /// The frozenset's named set methods (`union`, `issubset`, ...), bound to the members'
    /// `frozenset`: each takes any iterable, `Members` among them.
    fn __getattr__<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        if !SET_METHODS.contains(&name) {
            return Err(PyAttributeError::new_err(format!(
                "'Members' object has no attribute '{name}'"
            )));
        }
        self.frozen_set(py)?.getattr(name)
    }

    /// Itself, as a frozenset's copy is (nothing here changes).
    fn copy(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __copy__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __deepcopy__<'py>(slf: Bound<'py, Self>, _memo: &Bound<'py, PyAny>) -> Bound<'py, Self> {
        slf
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyType>, (Bound<'py, PyList>,))> {
        Ok((slf.get_type(), (slf.get().buf.list(slf.py())?,)))
    }

    fn __repr__(&self) -> String {
        self.buf.repr("Members")
    }
}

/// Members in order, repeats kept: a set put in order, a part of one, a chunk task's
/// followers; a `list` of `str` to every caller (indexed, sliced, compared, searched and added
/// as that list; unhashable, as a list is).
#[pyclass(frozen, weakref, module = "timeline_fanout._native", sequence)]
pub struct MemberList {
    buf: Buffer,
    set: PyOnceLock<Py<PyFrozenSet>>,
}

impl MemberList {
    pub fn new(buf: Buffer) -> MemberList {
        MemberList {
            buf,
            set: PyOnceLock::new(),
        }
    }

    pub fn buffer(&self) -> &Buffer {
        &self.buf
    }

    /// The members as a `list` of their `str`s, for what a list answers better than this.
    fn as_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.buf.list(py)
    }

    fn index_of(&self, at: &Bound<'_, PyAny>) -> PyResult<usize> {
        let Ok(int) = at.cast::<PyInt>() else {
            return Err(PyTypeError::new_err(format!(
                "list indices must be integers or slices, not {}",
                at.get_type().name()?
            )));
        };
        let Ok(at) = int.extract::<isize>() else {
            return Err(PyIndexError::new_err(
                "cannot fit 'int' into an index-sized integer",
            ));
        };
        let len = self.buf.len() as isize;
        let at = if at < 0 { at + len } else { at };
        if (0..len).contains(&at) {
            Ok(at as usize)
        } else {
            Err(PyIndexError::new_err("list index out of range"))
        }
    }
}

#[pymethods]
impl MemberList {
    /// The members of an iterable of `str`, in order, repeats kept.
    #[new]
    #[pyo3(signature = (members = None))]
    fn py_new(members: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        Ok(MemberList::new(Buffer::from_strs(members, |m| {
            Buffer::of(m)
        })?))
    }

    fn __len__(&self) -> usize {
        self.buf.len()
    }

    /// A member as a `str`, or a slice as a `MemberList`.
    fn __getitem__<'py>(&self, py: Python<'py>, at: &Bound<'py, PyAny>) -> PyResult<Py<PyAny>> {
        if let Ok(slice) = at.cast::<PySlice>() {
            let range = slice.indices(self.buf.len() as isize)?;
            let picked = (0..range.slicelength).map(|k| {
                self.buf
                    .get((range.start + k as isize * range.step) as usize)
            });
            let part = Buffer::of(picked).expect("a slice is no larger than its whole");
            return Ok(Py::new(py, MemberList::new(part))?.into_any());
        }
        Ok(self.buf.string(py, self.index_of(at)?).into_any().unbind())
    }

    fn __iter__(slf: Bound<'_, Self>) -> MembersIter {
        MembersIter {
            owner: Owner::List(slf.unbind()),
            at: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// A `str` through the members' `frozenset` (built on the first test and kept); anything
    /// else as a list tests it, by equality with each member.
    fn __contains__(&self, py: Python<'_>, member: &Bound<'_, PyAny>) -> PyResult<bool> {
        if member.is_exact_instance_of::<PyString>() {
            return self.buf.frozen(py, &self.set)?.bind(py).contains(member);
        }
        self.as_list(py)?.contains(member)
    }

    /// As the list of the members' `str`s compares (another `MemberList` as its list): with a
    /// `list` of `str` or a `MemberList`, equality without making one; with anything else, by
    /// Python's own comparison of that list.
    fn __richcmp__<'py>(
        &self,
        py: Python<'py>,
        other: &Bound<'py, PyAny>,
        op: CompareOp,
    ) -> PyResult<Py<PyAny>> {
        let equal = match op {
            CompareOp::Eq => Some(true),
            CompareOp::Ne => Some(false),
            _ => None,
        };
        if let (Ok(other), Some(equal)) = (other.cast::<MemberList>(), equal) {
            let (mine, theirs) = (&self.buf, &other.get().buf);
            let same = mine.ends == theirs.ends && mine.data == theirs.data;
            return Ok(PyBool::new(py, same == equal)
                .to_owned()
                .into_any()
                .unbind());
        }
        if let (Ok(list), Some(equal)) = (other.cast_exact::<PyList>(), equal) {
            let same = list.len() == self.buf.len()
                && list.iter().enumerate().all(|(i, item)| {
                    item.cast_exact::<PyString>()
                        .is_ok_and(|text| text.to_str().ok() == Some(self.buf.text(i)))
                });
            if same
                || list
                    .iter()
                    .all(|item| item.is_exact_instance_of::<PyString>())
            {
                return Ok(PyBool::new(py, same == equal)
                    .to_owned()
                    .into_any()
                    .unbind());
            }
        }
        let other = listed(py, other)?.unwrap_or_else(|| other.clone());
        Ok(self.as_list(py)?.rich_compare(other, op)?.unbind())
    }

    /// A `list`: the members' `str`s followed by another list's items.
    fn __add__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Py<PyAny>> {
        match listed(py, other)? {
            Some(other) => Ok(self.as_list(py)?.add(other)?.unbind()),
            None => Ok(py.NotImplemented()),
        }
    }

    fn __radd__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Py<PyAny>> {
        match listed(py, other)? {
            Some(other) => Ok(other.add(self.as_list(py)?)?.unbind()),
            None => Ok(py.NotImplemented()),
        }
    }

    #[pyo3(signature = (value, *bounds))]
    fn index<'py>(
        &self,
        py: Python<'py>,
        value: &Bound<'py, PyAny>,
        bounds: &Bound<'py, PyTuple>,
    ) -> PyResult<Py<PyAny>> {
        let mut args = vec![value.clone()];
        args.extend(bounds.iter());
        Ok(self
            .as_list(py)?
            .call_method1("index", PyTuple::new(py, args)?)?
            .unbind())
    }

    fn count(&self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<usize> {
        self.as_list(py)?.call_method1("count", (value,))?.extract()
    }

    /// A `list` of the members' `str`s, as a list's copy is.
    fn copy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.as_list(py)
    }

    fn __copy__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __deepcopy__<'py>(slf: Bound<'py, Self>, _memo: &Bound<'py, PyAny>) -> Bound<'py, Self> {
        slf
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyType>, (Bound<'py, PyList>,))> {
        Ok((slf.get_type(), (slf.get().as_list(slf.py())?,)))
    }

    fn __repr__(&self) -> String {
        self.buf.repr("MemberList")
    }
}

/// `other` as a set when it is one: a `set` or `frozenset` itself, `Members` as theirs.
fn as_set<'py>(py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
    if let Ok(members) = other.cast::<Members>() {
        return Ok(Some(members.get().frozen_set(py)?.into_any()));
    }
    let is_set = other.cast::<PyFrozenSet>().is_ok() || other.cast::<PySet>().is_ok();
    Ok(is_set.then(|| other.clone()))
}

/// `other` as a list when it is one: a `list` itself, a `MemberList` as its `str`s.
fn listed<'py>(py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
    if let Ok(members) = other.cast::<MemberList>() {
        return Ok(Some(members.get().as_list(py)?.into_any()));
    }
    Ok(other.cast::<PyList>().is_ok().then(|| other.clone()))
}

/// What a `MembersIter` walks.
enum Owner {
    Set(Py<Members>),
    List(Py<MemberList>),
}

impl Owner {
    fn buffer(&self) -> &Buffer {
        match self {
            Owner::Set(members) => &members.get().buf,
            Owner::List(members) => &members.get().buf,
        }
    }
}

/// Iterating either: a `str` per member, in order.
#[pyclass(frozen, module = "timeline_fanout._native")]
pub struct MembersIter {
    owner: Owner,
    at: std::sync::atomic::AtomicUsize,
}

#[pymethods]
impl MembersIter {
    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyString>> {
        let buf = self.owner.buffer();
        let at = self.at.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        (at < buf.len()).then(|| buf.string(py, at))
    }
}
