"""The output folder: refuse what must not be replaced, build the new tree beside it, swap it in atomically.

The tree is written into a staging folder beside OUT (`.OUT.o2g-XXXXXXXX/tree`, marked as ours by a file
inside), then swapped in: one atomic exchange where the kernel offers it (Linux renameat2), otherwise
"rename the old tree away, rename the new in"; the old tree is deleted last. A failure at any point leaves OUT
as it was; a kill leaves OUT complete (old or new) and a stale staging folder that the next run into the same
OUT removes (only folders carrying our marker and a dead owner are touched).

OUT is refused up front (exit 2) when it is, or contains, the current directory or any input file, when it
is a file, a broken symbolic link or a mount point, or when it is not empty and --force is not given. A
symbolic link to a directory is followed: the tree replaces the link's target.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import logging
import os
import secrets
import shutil
import socket
from pathlib import Path
from typing import Callable, Iterable

from .errors import OutputError

log = logging.getLogger("onnx2gemmini")
STAGING_TAG = ".o2g-"            # staging folders are named .OUT.o2g-<hex>
MARKER = ".onnx2gemmini-staging"  # inside every staging folder: proof that we made it, and who owns it
_RENAME_EXCHANGE = 2             # linux/fs.h


# ---- what OUT may be -----------------------------------------------------------------------------------

def protected_paths(paths: Iterable) -> list[Path]:
    """Input paths (files or data directories) -> the paths an OUT must not be or contain.

    A data directory stands for itself and for the model-zoo files inside it, so that an OUT inside it
    that holds them is refused too.
    """
    result = []
    for p in paths:
        if p is None or not isinstance(p, (str, Path)) or str(p) == "":
            continue
        p = Path(p)
        result.append(p)
        if p.is_dir():
            result += list(p.glob("test_data_set_*/input_*.pb")) + list(p.glob("input_*.pb"))
    return result


def check_output_dir(out: Path, force: bool, inputs: Iterable = ()) -> Path:
    """Refuse an OUT we must not write (see the module docstring) before any work is done, after removing
    what killed runs left there.

    Returns the real path the tree will replace (a symbolic link to an empty directory is followed; one to a
    non-empty directory is refused, --force or not), so that nothing about OUT can fail after the compile.
    """
    out = Path(out)
    if out.is_symlink() and not out.exists():
        raise OutputError(f"{out}: is a broken symbolic link")
    real = out.resolve()
    if real.exists() and not real.is_dir():
        raise OutputError(f"{out}: exists and is not a directory")
    _refuse_overlap(out, real, inputs)
    clean_stale(real)  # first: it may put back an OUT that a killed run had moved away
    if real.is_dir() and any(real.iterdir()):
        if out.is_symlink():  # --force replaces a folder, never one reached through a link
            raise OutputError(f"{out}: is a symbolic link to a non-empty folder ({real}); it is not replaced through "
                              "the link: pass that folder itself (with --force), or remove the link")
        if not force:
            raise OutputError(f"{out}: directory is not empty (use --force to replace it)")
        if os.path.ismount(real):
            raise OutputError(f"{out}: is a mount point; it cannot be replaced (choose a folder inside it)")
    parent = real.parent
    if not parent.is_dir():
        raise OutputError(f"{out}: parent directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{out}: cannot write in {parent} (permission denied)")
    return real


def _refuse_overlap(out: Path, real: Path, inputs: Iterable) -> None:
    """OUT must not be, or contain, the current directory or an input: replacing it would delete them."""
    try:
        cwd = Path.cwd().resolve()
    except OSError:  # the current directory was deleted: nothing left to protect there
        cwd = None
    if cwd is not None and (real == cwd or real in cwd.parents):
        raise OutputError(f"{out}: is or contains the current directory; choose another output directory")
    for p in protected_paths(inputs):
        target = p.resolve()
        if real == target or real in target.parents:
            raise OutputError(f"{out}: is or contains the input {p}; choose another output directory")


def replace_dir(out: Path, real: Path, force: bool, fill: Callable[[Path], None]) -> Path:
    """`fill(tree)` writes the new contents into a staging folder, which then replaces `real` (the path
    check_output_dir returned for `out`)."""
    staging = _make_staging(real)
    try:
        tree = staging / "tree"
        os.mkdir(tree)
        fill(tree)
        _install(tree, real, staging, force)
    except OSError as exc:
        raise OutputError(f"{out}: cannot write output: {exc.strerror or exc}") from None
    finally:
        _remove_staging(staging)
    return Path(out)


def _make_staging(real: Path) -> Path:
    """A new, marked staging folder beside OUT (os.mkdir, so the umask applies as to any folder)."""
    marker = json.dumps({"tool": "onnx2gemmini", "pid": os.getpid(), "host": socket.gethostname()})
    for _ in range(100):
        staging = real.parent / f".{real.name}{STAGING_TAG}{secrets.token_hex(4)}"
        try:
            os.mkdir(staging)
        except FileExistsError:
            continue
        except OSError as exc:
            raise OutputError(f"{real}: cannot create a folder in {real.parent}: {exc.strerror}") from None
        try:
            (staging / MARKER).write_text(marker)
        except OSError as exc:
            _remove_staging(staging)
            raise OutputError(f"{real}: cannot write in {real.parent}: {exc.strerror}") from None
        return staging
    raise OutputError(f"{real}: cannot create a staging folder in {real.parent}")  # pragma: no cover


def _remove_staging(staging: Path) -> None:
    """Delete a staging folder, its marker last: one half-deleted by a kill is still recognisably ours."""
    try:
        children = [c for c in staging.iterdir() if c.name != MARKER]
    except OSError:
        return
    for child in children:
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                child.unlink()
    shutil.rmtree(staging, ignore_errors=True)


def _install(tree: Path, real: Path, staging: Path, force: bool) -> None:
    """Put the complete `tree` at `real`; an old tree ends up inside `staging` (deleted with it)."""
    if not real.exists() or (real.is_dir() and not any(real.iterdir())):
        try:
            os.rename(tree, real)  # onto nothing, or onto an empty folder: atomic
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            if not force:
                raise OutputError(f"{real}: became non-empty while compiling (use --force to replace it)") from None
    if _exchange(tree, real):
        return
    old = staging / "old"
    os.rename(real, old)
    try:
        os.rename(tree, real)
    except OSError:
        os.rename(old, real)
        raise


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    renameat2 = getattr(_libc(), "renameat2", None)
    if renameat2 is None:
        return False
    at_fdcwd = -100
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


_LIBC: list = []


def _libc():
    """The C library (loaded once), or None where there is none to load."""
    if not _LIBC:
        try:
            _LIBC.append(ctypes.CDLL(None, use_errno=True))
        except OSError:  # pragma: no cover - not a POSIX system
            _LIBC.append(None)
    return _LIBC[0]


# ---- stale staging folders -----------------------------------------------------------------------------

def clean_stale(real: Path) -> list[Path]:
    """Remove staging folders of OUT left by killed runs; restore OUT if a kill left it missing.

    Only folders named like ours, holding our marker, whose owner process (on this host) is gone.
    """
    removed = []
    try:
        candidates = sorted(real.parent.glob(f".{_glob_escape(real.name)}{STAGING_TAG}*"))
    except OSError:
        return removed
    for staging in candidates:
        if not _is_stale(staging):
            continue
        old = staging / "old"
        if old.is_dir() and not real.exists():
            try:  # killed between the two renames of the fallback: the old tree is complete
                os.rename(old, real)
            except OSError as exc:
                log.warning("cannot restore %s from %s: %s", real, old, exc.strerror)
                continue
        _remove_staging(staging)
        if not staging.exists():
            removed.append(staging)
            log.info("removed %s, left by an interrupted run", staging)
    return removed


def _glob_escape(name: str) -> str:
    """OUT's name as a literal glob pattern (a folder may be called `out[1]`)."""
    return "".join(f"[{c}]" if c in "*?[]" else c for c in name)


def _is_stale(staging: Path) -> bool:
    """Ours (the marker says so) and its owner is dead; unreadable or foreign folders are never stale."""
    if staging.is_symlink() or not staging.is_dir():
        return False
    try:
        owner = json.loads((staging / MARKER).read_text())
        pid, host = int(owner["pid"]), owner["host"]
        ours = owner["tool"] == "onnx2gemmini"
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if not ours or host != socket.gethostname():
        return False
    if pid == os.getpid():
        return False  # our own, still being written (a folder of a dead namesake is too rare to matter)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive but another user's
        return False
    return False
