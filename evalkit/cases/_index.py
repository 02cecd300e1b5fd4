"""The sync index: what the last sync of a suite learned about its files, so the next one
reads and parses only what changed.

One file per suite directory, ``<cache>/sync/<sha256 of the directory's real path>.index``
(``<cache>`` is ``EVALKIT_CACHE_DIR``, else the user's cache directory). It holds:

- per case file: its stat (size, mtime, ctime, inode, device), the sha256 of its bytes and
  what the offline checks found in it (the findings and the parsed case);
- per fixture file: its stat and sha256;
- per server, workspace and dataset: each case's version hash as the last successful sync
  left it there (``synced``); ``evalkit sync`` names those cases by hash alone, and the
  server checks every hash against its own current version.

What the index may decide, and what it may not:

- A file whose stat is the one recorded is taken as unchanged without being read. Any write
  changes the ctime, which no tool can set back, so a file rewritten with the same size and
  mtime still counts as changed. A file changed within ``RACY_SECONDS`` of being recorded
  (filesystem timestamps are coarser than the writes they stamp) is read again next time.
- A file whose stat changed is read and hashed; if its bytes are the recorded ones, the
  recorded findings are reused, else it is parsed and checked again.
- The recorded findings are only used by the code that wrote them: the index carries a
  fingerprint of the checking code (``evalkit/cases/*.py``) and of the YAML, msgspec and
  regex libraries, and an index of another fingerprint, another suite or another format,
  or one that fails its checksum or does not decode, is ignored and rebuilt.
- The index never decides what the server has: ``synced`` only chooses which cases are sent
  by hash, and the server refuses a hash that is not its current version (the CLI then
  sends those cases in full).
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

import msgspec
import platformdirs

from evalkit.cases._validate import ParsedCase
from evalkit.cases.model import LintFinding

CACHE_ENV = "EVALKIT_CACHE_DIR"
FORMAT = 1
MAGIC = b"evalkit sync index\n"
RACY_SECONDS = 2
"""A file changed this recently (before it was read) is not vouched for by its stat: the
filesystem may stamp a later write in the same tick with the same times (git calls this
"racily clean")."""
UNUSED_DAYS = 30
"""An index not written for this long (its suite gone, a CI checkout's temporary directory)
is deleted when another one is written."""
MAX_TARGETS = 16
"""Servers, workspaces and datasets remembered per suite (the least recently synced go)."""

StatKey = tuple[int, int, int, int, int]


def cache_dir() -> Path:
    override = os.environ.get(CACHE_ENV)
    return Path(override) if override else Path(platformdirs.user_cache_dir("evalkit"))


def sync_target(server_url: str, workspace: str, dataset: str) -> str:
    """Where a sync went: the server (by URL), the workspace and the dataset."""
    return f"{server_url.rstrip('/')} {workspace} {dataset}"


def stat_key(st: os.stat_result) -> StatKey:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


class Checked(msgspec.Struct, kw_only=True, array_like=True, gc=False):
    """What the offline checks found in one case file."""

    findings: list[LintFinding]
    parsed: ParsedCase | None


class _CaseFileEntry(msgspec.Struct, array_like=True):
    stat: StatKey | None
    """None: the file was too recent to vouch for by stat."""
    sha256: bytes
    checked: msgspec.Raw
    """A ``Checked``, decoded only when the file is unchanged."""


class _FixtureEntry(msgspec.Struct, array_like=True):
    stat: StatKey | None
    sha256: str


class _Data(msgspec.Struct, kw_only=True):
    format: int
    fingerprint: str
    suite: str
    files: dict[str, _CaseFileEntry] = {}
    fixtures: dict[str, _FixtureEntry] = {}
    synced: dict[str, dict[str, str]] = {}
    """Target key -> case id -> version hash the last successful sync left there."""


_encoder = msgspec.msgpack.Encoder()
_data_decoder = msgspec.msgpack.Decoder(_Data)
_checked_decoder = msgspec.msgpack.Decoder(Checked)


def fingerprint() -> str:
    """Changes whenever the code that checks case files may give another answer."""
    import regex
    import yaml

    from evalkit import __version__

    digest = hashlib.sha256(f"{FORMAT} {__version__} {sys.version_info[:2]}".encode())
    libraries = f"msgspec {msgspec.__version__} yaml {yaml.__version__} "
    libraries += f"libyaml {getattr(yaml, '__with_libyaml__', False)} regex {regex.__version__}"
    digest.update(libraries.encode())
    for source in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()


class SuiteIndex:
    """The index of one suite directory, loaded once, saved once (``save``)."""

    def __init__(
        self, suite: Path, file: Path, data: _Data | None, *, racy_seconds: float = RACY_SECONDS
    ) -> None:
        self.suite = suite
        self.file = file
        self.fingerprint = fingerprint()
        fresh = (
            data is not None
            and data.format == FORMAT
            and data.fingerprint == self.fingerprint
            and data.suite == str(suite)
        )
        self._old = data if fresh and data is not None else None
        self._new = _Data(format=FORMAT, fingerprint=self.fingerprint, suite=str(suite))
        if self._old is not None:
            self._new.synced = dict(self._old.synced)
        self._changed = False
        self._vouch_before_ns = time.time_ns() - int(racy_seconds * 1e9)
        self.unchanged = 0
        """Case files taken from the index by their stat, not read."""
        self.read = 0
        """Case files read (and hashed) because their stat changed or was too recent."""
        self.parsed = 0
        """Case files parsed and checked: new, or their bytes changed."""

    @classmethod
    def open(
        cls, suite_dir: str | Path, *, root: Path | None = None, racy_seconds: float = RACY_SECONDS
    ) -> SuiteIndex:
        """The index of ``suite_dir``: the one on disk when it is sound, else an empty one.

        ``root`` is the cache directory (default: ``cache_dir()``); ``racy_seconds`` how long
        after its last change a file is read again rather than recognised by its stat.
        """
        suite = Path(os.path.realpath(suite_dir))
        name = hashlib.sha256(str(suite).encode()).hexdigest()[:32]
        file = (root or cache_dir()) / "sync" / f"{name}.index"
        return cls(suite, file, _load(file), racy_seconds=racy_seconds)

    @property
    def trusted(self) -> bool:
        """Whether an index was found on disk and is being used."""
        return self._old is not None

    # ----------------------------------------------------------------- case files

    def reuse_by_stat(self, name: str, st: os.stat_result, file: str) -> Checked | None:
        """What the checks found in ``name`` last time, when its stat is the recorded one."""
        old = self._old.files.get(name) if self._old is not None else None
        if old is None or old.stat is None or old.stat != stat_key(st):
            return None
        checked = self._reuse(old, file)
        if checked is not None:
            self._new.files[name] = old
            self.unchanged += 1
        return checked

    def reuse_by_content(
        self, name: str, st: os.stat_result, digest: bytes, file: str
    ) -> Checked | None:
        """What the checks found in ``name`` last time, when its bytes are the same."""
        self.read += 1
        old = self._old.files.get(name) if self._old is not None else None
        if old is None or old.sha256 != digest:
            return None
        checked = self._reuse(old, file)
        if checked is not None:
            self._keep(name, st, digest, old.checked)
        return checked

    def record(self, name: str, st: os.stat_result, digest: bytes, checked: Checked) -> None:
        """Keep what the checks found in a file just parsed (unless it does not round-trip
        through the index exactly, e.g. a NaN in its data: that file is parsed every time)."""
        self.parsed += 1
        if checked.parsed is not None:
            checked = Checked(
                findings=checked.findings,
                parsed=msgspec.structs.replace(checked.parsed, case_file=None),
            )
        try:
            raw = _encoder.encode(checked)
            same = _checked_decoder.decode(raw) == checked
        except (msgspec.EncodeError, msgspec.DecodeError, TypeError, ValueError, OverflowError):
            same = False
        if same:
            self._keep(name, st, digest, msgspec.Raw(raw))

    def _keep(self, name: str, st: os.stat_result, digest: bytes, raw: msgspec.Raw) -> None:
        self._new.files[name] = _CaseFileEntry(self._vouched(st), digest, raw)
        self._changed = True

    def _vouched(self, st: os.stat_result) -> StatKey | None:
        """The stat to recognise the file by next time; None when it changed too recently."""
        recent = max(st.st_mtime_ns, st.st_ctime_ns) >= self._vouch_before_ns
        return None if recent else stat_key(st)

    def _reuse(self, entry: _CaseFileEntry, file: str) -> Checked | None:
        try:
            checked = _checked_decoder.decode(entry.checked)
        except msgspec.DecodeError:
            return None
        if checked.parsed is not None and checked.parsed.file != file:
            checked.parsed.file = file
        if any(f.file != file for f in checked.findings):
            checked.findings = [msgspec.structs.replace(f, file=file) for f in checked.findings]
        return checked

    # ----------------------------------------------------------------- fixtures

    def fixture_sha256(self, path: Path) -> str:
        """The sha256 of a fixture file, read only when its stat changed."""
        key = str(path)
        st = os.stat(path)
        old = self._old.fixtures.get(key) if self._old is not None else None
        if old is not None and old.stat is not None and old.stat == stat_key(st):
            self._new.fixtures[key] = old
            return old.sha256
        with open(path, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        self._new.fixtures[key] = _FixtureEntry(self._vouched(st), digest)
        self._changed = True
        return digest

    # ----------------------------------------------------------------- synced

    def synced(self, target: str) -> dict[str, str]:
        """Case id -> version hash, as the last successful sync to ``target`` left them."""
        return self._new.synced.get(target, {})

    def remember(self, target: str, hashes: dict[str, str]) -> None:
        """After a successful sync: the server's current versions are ``hashes``."""
        if self._new.synced.get(target) == hashes and list(self._new.synced)[-1:] == [target]:
            return
        self._new.synced.pop(target, None)
        self._new.synced[target] = hashes
        while len(self._new.synced) > MAX_TARGETS:
            del self._new.synced[next(iter(self._new.synced))]
        self._changed = True

    def forget(self, target: str) -> None:
        if self._new.synced.pop(target, None) is not None:
            self._changed = True

    # ----------------------------------------------------------------- disk

    def save(self) -> str | None:
        """Write the index (files not seen in this run are dropped); returns why it could not
        be written, or None. Two syncs at once each write a whole index: the last one stays."""
        old, new = self._old, self._new
        if old is None:
            self._changed = self._changed or bool(new.files or new.fixtures or new.synced)
        else:
            self._changed = self._changed or new.files.keys() != old.files.keys()
            self._changed = self._changed or new.fixtures.keys() != old.fixtures.keys()
        if not self._changed:
            return None
        payload = _encoder.encode(self._new)
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.file.parent, prefix=".index-")
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(MAGIC + hashlib.sha256(payload).digest() + payload)
                os.replace(tmp, self.file)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            return f"{self.file}: {exc.strerror or exc}"
        self._changed = False
        _prune(self.file.parent, keep=self.file)
        return None


def _prune(directory: Path, *, keep: Path) -> None:
    """Delete the indexes (and leftover temporary files) not written for ``UNUSED_DAYS``."""
    cutoff = time.time() - UNUSED_DAYS * 86400
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                ours = entry.name.endswith(".index") or entry.name.startswith(".index-")
                if not ours or entry.path == str(keep):
                    continue
                try:
                    if entry.stat().st_mtime < cutoff:
                        os.unlink(entry.path)
                except OSError:
                    continue
    except OSError:
        return


def _load(file: Path) -> _Data | None:
    """The index in ``file``; None when there is none or it is not sound."""
    try:
        blob = file.read_bytes()
    except OSError:
        return None
    head = len(MAGIC) + 32
    if not blob.startswith(MAGIC) or len(blob) < head:
        return None
    payload = memoryview(blob)[head:]
    if hashlib.sha256(payload).digest() != blob[len(MAGIC) : head]:
        return None
    try:
        return _data_decoder.decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
