"""A published store read without zarr: only the files a query needs, each checked against the
store's SHA-256 manifest before its bytes are used.

The part of the zarr v3 core format that ``tablegen/store.py``'s stores use (anything else raises
``Unsupported``, and ``lookup.store.table`` reads it with zarr instead), through one directory
descriptor (``Snapshot``), with every size a file declares bounded before anything is allocated
or decoded.  docs/tables.md, "Reading a store without zarr".
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import stat
import threading
import weakref
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from lookup.store import codecs as decoders
from lookup.store.manifest import MANIFEST, MAX_MANIFEST_BYTES, UNLISTED, TableError, parse_manifest, read_at_most

NUMBER_TYPES = {name: np.dtype(name) for name in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                                                  "uint32", "uint64", "float16", "float32", "float64")}
FILL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
COMPRESSORS = ("blosc", "zstd", "crc32c")
MAX_AXIS = 1 << 20  # values of a one-dimensional array (an axis or the labels; the default table: 351 at most)
MAX_CHUNK_BYTES = 64 << 20  # a decoded chunk (the default table's row chunk: 2.9 MB)
MAX_ROW_BYTES = 128 << 20  # a row along the first axis, as float64 (the default table: 5.9 MB)
MAX_ARRAY_BYTES = 1 << 30  # a whole array read at once, as float64 (the default table's eps: 123 MB)
MAX_FILE_BYTES = 256 << 20  # one file of a store (the default table: 0.5 MB at most)
MAX_METADATA_BYTES = 1 << 20  # one metadata file (the default table's zarr.json: 18 KB, its largest)
METADATA = ("zarr.json", ".zattrs", ".zarray", ".zgroup", ".zmetadata")  # zarr v3 and v2 metadata files
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


class Unsupported(Exception):
    """A store (or array) using a part of the zarr format this reader does not implement."""


class IntegrityError(TableError):
    """A file that differs from the manifest, a store whose file set does not match it, or a
    chunk that fails its checksum: the table is refused."""

    def __init__(self, store: Path, problem: str) -> None:
        self.problem = problem
        super().__init__(f"{store}: refused, {problem} (corrupted or modified); rebuild or re-download it")


class Snapshot:
    """The files of a store as listed by its manifest, each read at most once (opened through the
    store's directory descriptor, read and closed) and verified against its SHA-256 before it is
    returned."""

    def __init__(self, store: Path) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._verified: dict[str, bytes] = {}
        self.refused = ""  # the first mismatch found: no file is read after it
        self._directory = _open_directory(store)
        self._finalizer = weakref.finalize(self, _close_directory, self._directory)
        try:
            self.listed = self._listing()
        except BaseException as err:
            self.close()
            if isinstance(err, OSError) and err.errno == errno.ELOOP:
                raise IntegrityError(store, "it holds a symbolic link (a store holds plain files only)") from None
            raise

    def _listing(self) -> dict[str, str]:
        """The manifest's listing (within its limits), once every listed path is inside the store
        and the store holds exactly the files listed (``IntegrityError`` otherwise)."""
        with self._open(MANIFEST) as manifest:
            listed = parse_manifest(read_bounded(MANIFEST, manifest).decode(), self.store)
        leaving = sorted(rel for rel in listed if not safe_relative(rel))
        if leaving:
            raise IntegrityError(self.store, f"the manifest lists {leaving[0]!r}, a path leaving the store")
        differ = sorted(set(_present(self.store, self._directory)).symmetric_difference(listed))
        if differ:
            raise IntegrityError(self.store, f"file set differs from the manifest ({differ[0]})")
        return listed

    def _open(self, rel: str) -> Any:
        """``rel`` opened for reading, never through a symbolic link (ELOOP where it is one)."""
        if self._directory is None:
            if (self.store / rel).is_symlink():
                raise OSError(errno.ELOOP, "symbolic link", rel)
            return open(self.store / rel, "rb")
        flags = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
        return open(os.open(rel, flags, dir_fd=self._directory), "rb")

    def read(self, rel: str) -> bytes | None:
        """The verified bytes of ``rel``; None for a file the manifest does not list (a chunk
        never written).  Raises ``IntegrityError`` if the bytes differ from the manifest twice,
        or the file is gone, and for every file not read yet once that has happened (the table is
        refused)."""
        with self._lock:
            if rel in self._verified:
                return self._verified[rel]
            if rel not in self.listed:
                return None
            if self.refused:
                raise IntegrityError(self.store, self.refused)
            for _ in range(2):  # a mismatch is re-read once before the table is refused
                data = self._read(rel)
                if hashlib.sha256(data).hexdigest() == self.listed[rel]:
                    break
            else:
                self.refused = f"{rel} does not match its SHA-256 in the manifest"
                raise IntegrityError(self.store, self.refused)
            self._verified[rel] = data
            return data

    def _read(self, rel: str) -> bytes:
        """The bytes of ``rel`` (opened, read within its limit, closed); ``IntegrityError`` where it
        is gone (removed since the table was opened), a symbolic link or unreadable, ``Refused``
        where it is larger than its limit."""
        try:
            with self._open(rel) as handle:
                return read_bounded(rel, handle)
        except FileNotFoundError:
            self.refused = f"{rel} was removed since the table was opened (published over? open it again)"
        except OSError as err:
            self.refused = (f"{rel} is a symbolic link (a store holds plain files only)" if err.errno == errno.ELOOP
                            else f"{rel} cannot be read ({err.strerror or err})")
        raise IntegrityError(self.store, self.refused)

    def close(self) -> None:
        """Close the directory descriptor (later reads of files not read yet fail)."""
        self._finalizer()
        self.refused = self.refused or "the table was closed"


def read_bounded(rel: str, handle: Any) -> bytes:
    """All of an open file, ``Refused`` where it is larger than its limit (``file_limit``: asked of
    the descriptor first, so nothing larger is read)."""
    limit = file_limit(rel)
    data = read_at_most(handle, limit)
    if data is None:
        raise Refused(f"{rel} is larger than {limit} bytes")
    return data


def file_limit(rel: str) -> int:
    """The most bytes the store's file ``rel`` may hold: its manifest ``MAX_MANIFEST_BYTES``, a metadata
    file ``MAX_METADATA_BYTES``, any other ``MAX_FILE_BYTES``."""
    name = rel.rsplit("/", 1)[-1]
    if rel == MANIFEST:
        return MAX_MANIFEST_BYTES
    return MAX_METADATA_BYTES if name in METADATA else MAX_FILE_BYTES


def _close_directory(directory: int | None) -> None:
    if directory is not None:
        os.close(directory)


def safe_relative(rel: str) -> bool:
    """Whether a listed path stays inside its store (relative, no "..", no empty part)."""
    parts = rel.split("/")
    return bool(rel) and not rel.startswith(("/", "\\")) and ":" not in rel and all(
        part not in ("", ".", "..") and "\\" not in part for part in parts)


def _open_directory(store: Path) -> int | None:
    """A descriptor of ``store`` to open its files through (None where the OS has no ``openat``)."""
    if os.open not in os.supports_dir_fd or not hasattr(os, "O_DIRECTORY"):
        return None
    return os.open(store, os.O_RDONLY | os.O_DIRECTORY)


def _present(store: Path, directory: int | None) -> list[str]:
    """Relative paths of the store's files (the manifest and its signature excepted), through
    ``directory`` if given; OSError ELOOP where one is a symbolic link (a store holds plain files)."""
    if directory is None:
        walk = ((os.path.relpath(root, store), files, None) for root, _, files in os.walk(store))
    else:
        walk = ((root, files, fd) for root, _, files, fd in os.fwalk(".", dir_fd=directory))
    found = []
    for root, files, fd in walk:
        for name in (name for name in files if name not in UNLISTED):
            link = (os.stat(name, dir_fd=fd, follow_symlinks=False) if fd is not None
                    else os.lstat(os.path.join(store, root, name))).st_mode
            if stat.S_ISLNK(link):
                raise OSError(errno.ELOOP, "symbolic link", name)
            found.append(os.path.normpath(os.path.join(root, name)).replace(os.sep, "/"))
    return found


class StoreGroup:
    """The root group of a published store: ``group[name]`` (a ``StoreArray``), ``name in group``
    and ``group.attrs``, like the zarr group it replaces."""

    def __init__(self, store: Path, snapshot: Snapshot) -> None:
        self.path, self.snapshot = store, snapshot
        self.listed = snapshot.listed  # the manifest listing the files were verified against
        root = snapshot.read("zarr.json")
        if root is None:
            raise Unsupported("no zarr.json")
        meta = json.loads(root)
        consolidated = meta.get("consolidated_metadata") or {}
        if meta.get("zarr_format") != 3 or meta.get("node_type") != "group" or consolidated.get("kind") != "inline":
            raise Unsupported("not a zarr v3 group with inline consolidated metadata")
        self.attrs: dict[str, Any] = meta.get("attributes", {})
        self._arrays = {name: StoreArray(self, name, m) for name, m in consolidated.get("metadata", {}).items()
                        if m.get("node_type") == "array"}

    def __getitem__(self, name: str) -> StoreArray:
        return self._arrays[name]

    def __contains__(self, name: str) -> bool:
        return name in self._arrays


class StoreArray:
    """One array of a ``StoreGroup``: ``a[...]`` decodes all of it, ``a[r]`` only the chunks of
    row ``r`` along the first axis (the table's mechanism rows are one chunk each; read-only,
    a view of the decoded chunk)."""

    def __init__(self, group: StoreGroup, name: str, meta: dict[str, Any]) -> None:
        self.group, self.name = group, name
        self.shape = tuple(int(s) for s in meta["shape"])
        grid, keys = meta.get("chunk_grid", {}), meta.get("chunk_key_encoding", {})
        if grid.get("name") != "regular" or keys.get("name") != "default" or meta.get("storage_transformers"):
            raise Unsupported(f"{name}: chunk grid, chunk keys or storage transformers")
        self.chunks = tuple(int(c) for c in grid["configuration"]["chunk_shape"])
        self.separator = keys.get("configuration", {}).get("separator", "/")
        if len(self.chunks) != len(self.shape) or self.separator not in "/.":
            raise Unsupported(f"{name}: chunk shape or key separator")
        self._parse_codecs(meta)
        self.fill = _fill_value(name, self.dtype, meta.get("fill_value"))
        self.attrs: dict[str, Any] = meta.get("attributes", {})
        check_shape(name, self.shape, self.chunks, self.stored.itemsize)

    def _parse_codecs(self, meta: dict[str, Any]) -> None:
        """``self.order`` (transpose, or None), ``self.stored`` (the data type as encoded),
        ``self.dtype`` (in native byte order, as returned) and ``self.compressors`` (in writing
        order) from the codec chain, or ``Unsupported``."""
        codecs = [(c["name"], c.get("configuration") or {}) for c in meta.get("codecs", [])]
        data_type = meta.get("data_type")
        self.order = None
        if codecs and codecs[0][0] == "transpose":
            self.order = tuple(int(i) for i in codecs.pop(0)[1]["order"])
            if sorted(self.order) != list(range(len(self.shape))):
                raise Unsupported(f"{self.name}: transpose order {self.order}")
        serializer, config = codecs.pop(0) if codecs else (None, {})
        if serializer == "bytes" and data_type in NUMBER_TYPES:
            endian = {"little": "<", "big": ">", None: "="}.get(config.get("endian"))
            if endian is None:
                raise Unsupported(f"{self.name}: endian {config.get('endian')!r}")
            self.stored, self.dtype = NUMBER_TYPES[data_type].newbyteorder(endian), NUMBER_TYPES[data_type]
        elif serializer == "vlen-utf8" and data_type == "string":
            self.stored = self.dtype = np.dtype(object)
        else:
            raise Unsupported(f"{self.name}: data type {data_type!r} with {serializer!r}")
        self.compressors = [name for name, _ in codecs]
        if any(name not in COMPRESSORS for name in self.compressors):
            raise Unsupported(f"{self.name}: codecs {self.compressors}")
        if "crc32c" in self.compressors and _crc32c_function() is None:
            raise Unsupported(f"{self.name}: crc32c without google-crc32c or crc32c installed")

    def __getitem__(self, key: Any) -> np.ndarray:
        if key is Ellipsis:  # a writable array, as zarr returns
            if 8 * math.prod(self.shape) > MAX_ARRAY_BYTES:
                raise IntegrityError(self.group.path, f"{self.name} declares {self.shape} values, more than a "
                                     f"whole-array read of {MAX_ARRAY_BYTES} bytes allows")
            whole = self.rows(0, self.shape[0]) if self.shape else self._chunk(())
            return whole if whole.flags.writeable else whole.copy()
        if isinstance(key, int | np.integer) and self.shape:
            r = range(self.shape[0])[key]  # negative rows as numpy counts them; IndexError past the end
            return self.rows(r, r + 1)[0]
        raise TypeError(f"{self.name}: only a[...] and a[row] are read here, not a[{key!r}]")

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start``..``stop - 1`` along the first axis, from the chunks holding them (a view
        of the decoded chunk where one chunk holds them all, e.g. a table row)."""
        first_chunk, offset = divmod(start, self.chunks[0])
        if self.chunks[1:] == self.shape[1:] and offset + stop - start <= self.chunks[0] and stop > start:
            return self._chunk((first_chunk, *[0] * (len(self.shape) - 1)))[offset:offset + stop - start]
        out = np.full((stop - start, *self.shape[1:]), self.fill, dtype=self.dtype)
        grid = [math.ceil(s / c) for s, c in zip(self.shape, self.chunks, strict=True)]
        first = range(start // self.chunks[0], (stop - 1) // self.chunks[0] + 1) if stop > start else range(0)
        for index in ((i, *rest) for i in first for rest in np.ndindex(*grid[1:])):
            corner = [i * c for i, c in zip(index, self.chunks, strict=True)]
            # the part of this chunk inside the request (a chunk at the end of an axis is padded)
            lo, hi = max(start, corner[0]), min(stop, corner[0] + self.chunks[0])
            sizes = [min(c, s - k) for c, s, k in zip(self.chunks[1:], self.shape[1:], corner[1:], strict=True)]
            target = (slice(lo - start, hi - start), *(slice(k, k + m) for k, m in zip(corner[1:], sizes, strict=True)))
            source = (slice(lo - corner[0], hi - corner[0]), *(slice(0, m) for m in sizes))
            out[target] = self._chunk(index)[source]
        return out

    def _chunk(self, index: tuple[int, ...]) -> np.ndarray:
        """One decoded chunk (its full chunk shape), the fill value where it was never written."""
        rel = "/".join([self.name, self.separator.join(["c", *map(str, index)])])
        snapshot = self.group.snapshot
        try:
            data = snapshot.read(rel)
            if data is None:
                return np.full(self.chunks, self.fill, dtype=self.dtype)
            return self._decode(data)
        except IntegrityError:
            raise
        except Exception as err:  # noqa: BLE001 - unreadable, too large, a checksum or decompression failure
            snapshot.refused = snapshot.refused or f"{rel} cannot be read ({type(err).__name__}: {err})"
            raise IntegrityError(snapshot.store, snapshot.refused) from None

    def _decode(self, data: bytes) -> np.ndarray:
        """The chunk encoded in ``data``: the codecs undone in reverse order, each decompression
        only once the size it declares is the size expected (``declared_size``)."""
        expected = math.prod(self.chunks) * self.stored.itemsize if self.dtype.kind != "O" else None
        chain = list(reversed(self.compressors))
        for stage, name in enumerate(chain):
            if name == "crc32c":
                if len(data) < 4 or crc32c(data[:-4]) != int.from_bytes(data[-4:], "little"):
                    raise ValueError("crc32c checksum mismatch")
                data = data[:-4]
            else:  # blosc or zstd (the modules without numcodecs' package __init__: lookup/store/codecs.py)
                innermost = all(c == "crc32c" for c in chain[stage + 1:])  # decompressed: the chunk's bytes
                check_declared_size(self.name, name, data, expected if innermost else None)
                data = decoders.module(name).decompress(data)
        encoded = [self.chunks[i] for i in self.order] if self.order else list(self.chunks)
        if self.dtype.kind == "O":
            if len(data) < 4 or int.from_bytes(data[:4], "little") != math.prod(self.chunks):
                raise ValueError(f"a vlen-utf8 chunk declaring other than {math.prod(self.chunks)} items")
            values = decoders.module("vlen").VLenUTF8().decode(data).reshape(encoded)
        else:
            values = np.frombuffer(data, dtype=self.stored).reshape(encoded).astype(self.dtype, copy=False)
        return values.transpose(np.argsort(self.order)) if self.order else values


def check_shape(name: str, shape: tuple[int, ...], chunks: tuple[int, ...], itemsize: int) -> None:
    """Declared shape and chunk shape of array ``name`` within the limits (``MAX_AXIS``,
    ``MAX_CHUNK_BYTES``, ``MAX_ROW_BYTES``); ``Refused`` naming the array otherwise, before
    anything is allocated."""
    if any(s < 0 for s in shape) or any(c < 1 for c in chunks):
        raise Refused(f"{name} declares shape {shape} with chunks {chunks}")
    if len(shape) == 1 and shape[0] > MAX_AXIS:
        raise Refused(f"{name} declares {shape[0]} values, more than {MAX_AXIS}")
    if math.prod(chunks) * max(itemsize, 8) > MAX_CHUNK_BYTES:
        raise Refused(f"{name} declares chunks of {chunks}, more than {MAX_CHUNK_BYTES} bytes decoded")
    if shape and 8 * math.prod(shape[1:]) > MAX_ROW_BYTES:
        raise Refused(f"{name} declares rows of {shape[1:]}, more than {MAX_ROW_BYTES} bytes")


def check_declared_size(array: str, codec: str, data: bytes, expected: int | None) -> None:
    """The decompressed size a blosc or zstd chunk declares is ``expected`` (at most
    ``MAX_CHUNK_BYTES`` where None), read from its header before decompressing; ValueError."""
    size = declared_size(codec, data)
    if size is None or size > MAX_CHUNK_BYTES or (expected is not None and size != expected):
        want = f"{expected}" if expected is not None else f"at most {MAX_CHUNK_BYTES}"
        raise ValueError(f"{array}: a {codec} chunk of {len(data)} bytes declares {size} bytes decompressed, "
                         f"expected {want}")


def declared_size(codec: str, data: bytes) -> int | None:
    """Decompressed size declared by a blosc header (bytes 4-7, little-endian) or a zstd frame
    header (its Frame_Content_Size, RFC 8878 section 3.1.1.1); None where it declares none.  gzip
    declares none that binds (its ISIZE is modulo 2^32): a gzip chunk (zarr's reader only) is
    inflated here up to ``MAX_CHUNK_BYTES`` + 1 bytes, one member (RFC 1952), and that size taken."""
    if codec == "gzip":
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            size = len(inflate.decompress(data, MAX_CHUNK_BYTES + 1))
        except zlib.error:
            return None
        return size if inflate.eof and not inflate.unconsumed_tail and not inflate.unused_data else None
    if codec == "blosc":
        return int.from_bytes(data[4:8], "little") if len(data) >= 16 else None
    if len(data) < 6 or data[:4] != ZSTD_MAGIC:
        return None
    descriptor = data[4]
    fcs_flag, single = descriptor >> 6, (descriptor >> 5) & 1
    start = 5 + (0 if single else 1) + (0, 1, 2, 4)[descriptor & 3]
    width = (1 if single else 0, 2, 4, 8)[fcs_flag]
    if width == 0 or len(data) < start + width:
        return None
    size = int.from_bytes(data[start:start + width], "little")
    return size + 256 if width == 2 else size


class Refused(TableError):
    """A store whose metadata or chunk headers declare more than the reading limits allow."""


def check_declared(files: dict[str, bytes]) -> None:
    """For a store read whole (``lookup.store.table.MemoryGroup``, zarr's reader): every array's declared
    shape and chunk shape in its consolidated metadata within the limits (``check_shape``), every
    array within a whole-array read (``MAX_ARRAY_BYTES`` as float64: that reader decodes arrays
    whole, filling chunks that are not there, so a metadata-only shape would allocate what it
    declares), codec chains whose sizes can be checked (``compressors``), the size every chunk
    (every file of an array but its metadata, whatever its key encoding) declares, a trailing
    crc32c set aside, at most ``MAX_CHUNK_BYTES``, and the items a vlen-utf8 chunk declares its
    chunk shape's (decompressed here: at most ``MAX_CHUNK_BYTES``); ``Refused`` otherwise."""
    try:
        meta = json.loads(files.get("zarr.json", b"{}"))
        arrays = {name: m for name, m in (meta.get("consolidated_metadata") or {}).get("metadata", {}).items()
                  if m.get("node_type") == "array"}
        codecs, items = {}, {}
        for name, m in arrays.items():
            chunks = m.get("chunk_grid", {}).get("configuration", {}).get("chunk_shape", m.get("shape"))
            itemsize = NUMBER_TYPES[m["data_type"]].itemsize if m.get("data_type") in NUMBER_TYPES else 8
            shape = tuple(int(x) for x in m["shape"])
            check_shape(name, shape, tuple(int(x) for x in chunks), itemsize)
            if 8 * math.prod(shape) > MAX_ARRAY_BYTES:
                raise Refused(f"{name} declares {shape} values, more than a whole-array read of {MAX_ARRAY_BYTES} "
                              "bytes allows")
            codecs[name] = compressors(name, [c["name"] for c in m.get("codecs", [])])
            if m.get("data_type") == "string":
                items[name] = math.prod(int(x) for x in chunks)
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise Refused(f"its metadata cannot be checked against the reading limits ({err})") from None
    for rel, data in files.items():
        name = next((a for a in codecs if rel.startswith(f"{a}/") and rel != f"{a}/zarr.json"), None)
        chain = list(codecs.get(name, [])) if name is not None else []  # every file of an array: a chunk
        if chain and chain[-1] == "crc32c":
            chain.pop()
            data = data[:-4]
        try:
            if chain:
                check_declared_size(rel, chain[-1], data, None)
            if name in items:  # vlen-utf8: numcodecs makes an array of the items declared before reading one
                decoded = decoders.module(chain[-1]).decompress(data) if chain else data
                if int.from_bytes(decoded[:4], "little") != items[name]:
                    raise ValueError(f"{rel}: a vlen-utf8 chunk declaring other than {items[name]} items")
        except ValueError as err:
            raise Refused(str(err)) from None


def compressors(name: str, chain: list[str]) -> list[str]:
    """The bytes-to-bytes codecs of array ``name``'s ``chain`` where the size of what they decode
    can be checked first (``declared_size``): at most one of blosc, zstd and gzip, then crc32c or
    not (a chain of several, or another codec, could inflate unchecked: a gzip chunk of 0.3 MB once
    inflated to 300 MB); ``Refused`` otherwise."""
    rest = chain[1:] if chain[:1] == ["transpose"] else chain
    if rest[:1] not in (["bytes"], ["vlen-utf8"]):
        raise Refused(f"{name}: codecs {chain} (an array is bytes or vlen-utf8, then blosc or zstd, then crc32c)")
    rest = rest[1:]
    if rest[-1:] == ["crc32c"]:
        rest = rest[:-1]
    if len(rest) > 1 or (rest and rest[0] not in ("blosc", "zstd", "gzip")):
        raise Refused(f"{name}: codecs {chain}: only one of blosc, zstd or gzip, then crc32c, are read (the "
                      "sizes of what they decode are checked first)")
    return [*rest, *(["crc32c"] if chain[-1:] == ["crc32c"] else [])]


def _fill_value(name: str, dtype: np.dtype, value: Any) -> Any:
    """The fill value of the metadata in ``dtype`` (numbers, NaN/Infinity/-Infinity, strings)."""
    if dtype.kind == "O":
        if not isinstance(value, str):
            raise Unsupported(f"{name}: fill value {value!r}")
        return value
    value = FILL_FLOATS.get(value, value) if dtype.kind == "f" else value
    if not isinstance(value, bool | int | float) or (dtype.kind != "f" and not float(value).is_integer()):
        raise Unsupported(f"{name}: fill value {value!r}")
    return value


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of ``data``, as zarr's crc32c codec computes it."""
    crc = _crc32c_function()
    if crc is None:
        raise Unsupported("no CRC-32C implementation (google-crc32c or crc32c) is installed")
    return crc(data)


def _crc32c_function() -> Any:
    """google-crc32c's (zarr's dependency), else the crc32c package's (older zarr 3), else None."""
    try:
        from google_crc32c import value
    except ImportError:
        try:
            from crc32c import crc32c as value
        except ImportError:
            return None
    return value


def open_group(store: Path) -> StoreGroup:
    """The verified group of the published store at ``store``: snapshot and root metadata read in
    one pass, once again if a file differs from the manifest or the file set changes meanwhile
    (a table published over this one mid-read); ``IntegrityError`` if it happens twice,
    ``Unsupported`` for a store this module cannot read."""
    for attempt in range(2):
        snapshot = None
        try:
            snapshot = Snapshot(store)
            return StoreGroup(store, snapshot)
        except (IntegrityError, Unsupported) as err:
            if snapshot is not None:
                snapshot.close()
            if attempt or isinstance(err, Unsupported):
                raise
    raise AssertionError("unreachable")
