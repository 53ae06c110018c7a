"""The disk (offline) kernel cache: kernels compiled by one process are loaded by the next.

Most tests run the same small program in fresh interpreters (``sys.executable``) with
``QTRACE_CACHE_DIR`` pointing into ``tmp_path``: the first compiles and writes, the next
loads. Nothing here touches the real user cache directory.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest

import qtrace as qt
from qtrace.kernels import disk_cache, llvm_cpu, sequence, tiering
from qtrace.kernels.disk_cache import QtraceCacheWarning

# The program every process runs: a jitted step with transcendental functions, a
# gather (so check_bounds changes the code) and a reduction. It prints one JSON line:
# qtrace counters, a digest of the result bytes, the error vs float64 NumPy, the
# QtraceCacheWarnings raised, and the message of an out-of-bounds gather.
PROGRAM = r"""
import hashlib, json, sys, time, warnings
import numpy as np
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import qtrace as qt
    opts = json.loads(sys.argv[1])
    for k, v in opts.get("config", {}).items():
        setattr(qt.config, k, v)
    if opts.get("start"):
        while time.time() < opts["start"]:
            time.sleep(0.001)
    x = np.linspace(-2.0, 2.0, 1000, dtype=np.float32)
    idx = (np.arange(1000) * 7) % 1000

    def step(m, x, idx):
        y = m.sin(x) * m.exp(-x * x) + m.tanh(x * 3.0)
        return y[idx] * 0.5 + m.sqrt(m.abs(y)), m.sum(y * y)

    out, total = qt.jit(lambda x, idx: step(qt, x, idx))(x, idx)
    out, total = out.numpy(), total.numpy()
    stats = qt.stats()
    ref, ref_total = step(np, x.astype(np.float64), idx)
    err = max(float(np.abs(out - ref).max()), abs(float(total) - ref_total) / ref_total)
    try:
        qt.jit(lambda x, idx: step(qt, x, idx))(x, idx + 5)
        index_error = None
    except Exception as e:  # IndexError, naming the gather
        index_error = f"{type(e).__name__}: {e}"
print(json.dumps({
    "stats": stats, "err": err, "index_error": index_error,
    "digest": hashlib.sha256(out.tobytes() + total.tobytes()).hexdigest(),
    "warnings": [f"{w.category.__name__}: {w.message}" for w in caught
                 if w.category.__name__ == "QtraceCacheWarning"],
}))
"""


def _env(cache_dir, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QTRACE_")}
    env["QTRACE_CACHE_DIR"] = str(cache_dir)
    env["QTRACE_NUM_THREADS"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_program(cache_dir, config=None, start=None, **env) -> dict:
    """Run :data:`PROGRAM` in a new interpreter; its JSON report plus its stderr."""
    p = subprocess.run([sys.executable, "-c", PROGRAM, json.dumps({"config": config or {},
                                                                   "start": start})],
                       env=_env(cache_dir, **env), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout.strip().splitlines()[-1])
    report["stderr"] = p.stderr
    return report


def entry_files(cache_dir) -> list:
    """The cache's kernel entries (not the sequence runner's, which a program launching a
    run of small kernels adds), once this process's optimising compiles are done (under
    ``QTRACE_TIERED=1`` a small plan's entry is written when its optimised code is)."""
    tiering.wait()
    d = os.path.join(cache_dir, "kernels")
    runner = disk_cache._kernels_id([sequence.KEY])
    return sorted(os.path.join(d, n) for n in os.listdir(d) if not n.startswith(runner)) \
        if os.path.isdir(d) else []


def single_entry(cache_dir) -> str:
    """The kernels' one entry, after removing the sequence runner's (for tests counting
    the entries of the cache)."""
    d = os.path.join(cache_dir, "kernels")
    for n in os.listdir(d):
        if n.startswith(disk_cache._kernels_id([sequence.KEY])):
            os.unlink(os.path.join(d, n))
    (entry,) = entry_files(cache_dir)
    return entry


def assert_valid_entry(path) -> dict:
    """The entry at ``path`` parses and its payload matches its checksum."""
    with open(path, "rb") as f:
        header, payload = disk_cache._parse(f.read())
    assert header["payload_bytes"] == len(payload)
    assert header["payload_sha256"] == hashlib.sha256(payload).hexdigest()
    return header


OPTIONS = {"fusion": True, "check_bounds": True}


def _unique_object():
    """Object code of one fresh kernel (a constant no other test uses), and its task."""
    from qtrace.graph.plan import build_plan
    from qtrace.kernels import codegen

    c = float(int.from_bytes(os.urandom(3), "little")) + 0.5
    node = (qt.asarray(np.arange(16.0)) * c)._node
    spec = build_plan((node,), True)
    (task,) = spec.tasks
    module = llvm_cpu.new_module("race")
    codegen.lower_task(task, module, task.symbol, True)
    _, obj = llvm_cpu.compile_module(module, [task.symbol])
    return {task.symbol: task}, obj


def _compiled(report) -> bool:
    s = report["stats"]
    return s["compiles"] > 0 and s["cache_hits_disk"] == 0


def _loaded(report) -> bool:
    s = report["stats"]
    return s["compiles"] == 0 and s["cache_hits_disk"] > 0


# --------------------------------------------------------------------------- across processes


def test_new_process_loads_instead_of_compiling(tmp_path):
    first = run_program(tmp_path)
    assert _compiled(first) and not first["warnings"]
    assert first["err"] < 1e-5
    second = run_program(tmp_path)
    assert _loaded(second), second["stats"]
    assert second["stats"]["cache_hits_disk"] == first["stats"]["compiles"]
    assert second["digest"] == first["digest"]  # bitwise identical
    assert not second["warnings"]
    # identities baked into the code are content hashes: the loaded kernel reports alike
    assert second["index_error"] == first["index_error"] is not None
    assert len(entry_files(tmp_path)) == 1


WARM = r"""
import json, sys
import numpy as np
import qtrace as qt
from qtrace.kernels import sequence
x = np.linspace(-1.0, 1.0, 200, dtype=np.float32)
ys = [qt.sin(qt.asarray(x) * float(k)) + float(k) for k in range(6)]
qt.eval(*ys)
print(json.dumps({"llvm": "llvmlite.binding" in sys.modules, "stats": qt.stats(),
                  "sequence": sequence._runner is not None,
                  "values": [float(v) for y in ys for v in y.numpy()[::7]]}))
"""


@pytest.mark.skipif(sys.platform != "linux" or os.uname().machine != "x86_64",
                    reason="kernels load without LLVM where qtrace's ELF loader applies")
def test_a_warm_start_does_not_load_llvm(tmp_path):
    """A process whose kernels (and the sequence runner that launches runs of small
    kernels) are all in the disk cache neither imports LLVM's binding nor asks it for the
    host's identity (read from the machine record the first process wrote)."""
    reports = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", WARM], env=_env(tmp_path, QTRACE_FUSION=0),
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        reports.append(json.loads(p.stdout.strip().splitlines()[-1]))
    first, second = reports
    assert first["llvm"] and first["stats"]["compiles"] > 0 and first["sequence"]
    assert not second["llvm"], "a warm start loaded LLVM"
    assert second["stats"]["compiles"] == 0 and second["sequence"]
    assert second["stats"]["cache_hits_disk"] == first["stats"]["compiles"]
    assert second["values"] == first["values"]
    x = np.linspace(-1.0, 1.0, 200, dtype=np.float32)
    want = [float(v) for k in range(6) for v in (np.sin(x * np.float32(k)) + k)[::7]]
    np.testing.assert_allclose(second["values"], want, rtol=1e-6, atol=1e-6)
    records = [n for n in os.listdir(tmp_path) if n.startswith("machine-")]
    assert len(records) == 1


def test_machine_record_is_read_or_rebuilt(tmp_path, monkeypatch):
    """The host's identity comes from its record when the record is sound; a missing,
    damaged or foreign-shaped record is replaced by LLVM's answer."""
    from qtrace.kernels import host
    monkeypatch.setattr(qt.config, "cache_dir", str(tmp_path))
    if host.fingerprint() is None:
        pytest.skip("no /proc/cpuinfo: LLVM is always asked")
    truth = llvm_cpu.target_info()
    path = host._record_path()
    for damage in (None, "{not json", json.dumps({"cpu": 1}), json.dumps({**truth, "extra": "x"})):
        if damage is not None:
            with open(path, "w") as f:
                f.write(damage)
        monkeypatch.setattr(host, "_info", [])
        assert host.target_info() == truth
        assert host._read(path) == truth
    fake = {**truth, "cpu": "a-cpu-from-the-record"}
    with open(path, "w") as f:
        json.dump(fake, f)
    monkeypatch.setattr(host, "_info", [])
    assert host.target_info() == fake     # read, not asked again


def _truncate_payload(data: bytes) -> bytes:
    return data[: data.index(b"\n") + 1 + (len(data) - data.index(b"\n")) // 2]


def _flip_payload_bytes(data: bytes) -> bytes:
    out = bytearray(data)
    for i in range(len(out) - 200, len(out) - 100):
        out[i] ^= 0xFF
    return bytes(out)


def _header_edit(**changes):
    def edit(data: bytes) -> bytes:
        end = data.index(b"\n")
        header = json.loads(data[:end])
        header.update(changes)
        return json.dumps(header).encode() + data[end:]
    return edit


CORRUPTIONS = {
    "truncated-payload": _truncate_payload,
    "truncated-header": lambda data: data[:40],
    "empty": lambda data: b"",
    "flipped-bytes": _flip_payload_bytes,
    "garbage-header": lambda data: b"{not json at all" + data[data.index(b"\n"):],
    "binary-garbage": lambda data: bytes(range(256)) * 40,
    "wrong-format-version": _header_edit(version=999),
    "foreign-format": _header_edit(format="someone-else"),
    "altered-components": _header_edit(components={"device": "cpu"}),
}


@pytest.mark.parametrize("corrupt", ["truncated-payload", "flipped-bytes", "wrong-format-version"])
def test_corrupt_entry_warns_and_is_rebuilt(tmp_path, corrupt):
    first = run_program(tmp_path)
    (path,) = entry_files(tmp_path)
    with open(path, "rb") as f:
        good = f.read()
    with open(path, "wb") as f:
        f.write(CORRUPTIONS[corrupt](good))
    report = run_program(tmp_path)
    assert _compiled(report), report["stats"]
    assert len(report["warnings"]) == 1, report["warnings"]
    assert "ignoring entry" in report["warnings"][0] and os.path.basename(path) in report["warnings"][0]
    assert report["digest"] == first["digest"]
    # rebuilt: overwritten in place with a valid entry, which the next process loads
    assert entry_files(tmp_path) == [path]
    assert_valid_entry(path)
    again = run_program(tmp_path)
    assert _loaded(again) and not again["warnings"]
    assert again["digest"] == first["digest"]


@pytest.mark.parametrize("corrupt", list(CORRUPTIONS), ids=list(CORRUPTIONS))
def test_corrupt_entry_is_ignored_with_a_warning(tmp_path, monkeypatch, corrupt):
    """Every kind of damage, in this process through the cache's own interface."""
    monkeypatch.setattr(qt.config, "cache_dir", str(tmp_path))
    monkeypatch.setattr(qt.config, "offline_cache", True)
    tasks, obj = _unique_object()
    entry, loaded = disk_cache.lookup(tasks, OPTIONS)
    assert loaded is None
    entry.store(obj)
    with open(entry.path, "rb") as f:
        good = f.read()
    with open(entry.path, "wb") as f:
        f.write(CORRUPTIONS[corrupt](good))
    with pytest.warns(QtraceCacheWarning, match="ignoring entry"):
        entry, loaded = disk_cache.lookup(tasks, OPTIONS)
    assert loaded is None
    entry.store(obj)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, loaded = disk_cache.lookup(tasks, OPTIONS)
    assert set(loaded) == set(tasks)


def test_concurrent_writers(tmp_path):
    """Several processes compiling the same kernels at once: all right, one valid entry."""
    start = time.time() + 2.0  # all of them past their imports, then compiling together
    args = [sys.executable, "-c", PROGRAM, json.dumps({"config": {}, "start": start})]
    procs = [subprocess.Popen(args, env=_env(tmp_path), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))
    for r in reports:
        assert r["digest"] == reports[0]["digest"] and r["err"] < 1e-5
        assert not r["warnings"]
    (entry,) = entry_files(tmp_path)  # one entry, no temporary files left behind
    assert entry.endswith(".qtk")
    assert_valid_entry(entry)
    after = run_program(tmp_path)
    assert _loaded(after) and not after["warnings"]


# --------------------------------------------------------------------------- directory and security


def test_cache_directory_is_created_private(tmp_path):
    cache = tmp_path / "deep" / "qtrace-cache"
    old = os.umask(0o022)
    try:
        run_program(cache)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(cache / "kernels").st_mode) == 0o700
    (entry,) = entry_files(cache)
    assert stat.S_IMODE(os.stat(entry).st_mode) & 0o077 == 0


@pytest.mark.parametrize("which,mode", [("root", 0o777), ("kernels", 0o770)])
def test_writable_by_others_is_refused(tmp_path, which, mode):
    first = run_program(tmp_path)
    assert _compiled(first)
    (entry,) = entry_files(tmp_path)
    before = os.stat(entry).st_mtime_ns
    os.chmod(tmp_path if which == "root" else tmp_path / "kernels", mode)
    report = run_program(tmp_path)
    assert _compiled(report), "loaded native code from a directory others can write"
    assert len(report["warnings"]) == 1 and "writable by group or others" in report["warnings"][0]
    assert report["digest"] == first["digest"]
    assert os.stat(entry).st_mtime_ns == before  # nor written to


def test_offline_cache_off_writes_nothing(tmp_path):
    cache = tmp_path / "c"
    for _ in range(2):
        report = run_program(cache, QTRACE_OFFLINE_CACHE="0")
        assert _compiled(report) and report["err"] < 1e-5
    assert not cache.exists()


def test_dump_ir_reads_no_entry(tmp_path, monkeypatch):
    """With QTRACE_DUMP_IR set every kernel is compiled (so its IR is dumped), and stored."""
    monkeypatch.setattr(qt.config, "cache_dir", str(tmp_path))
    monkeypatch.setattr(qt.config, "offline_cache", True)
    tasks, obj = _unique_object()
    entry, _ = disk_cache.lookup(tasks, OPTIONS)
    entry.store(obj)
    monkeypatch.setattr(qt.config, "dump_ir", str(tmp_path / "ir"))
    entry, loaded = disk_cache.lookup(tasks, OPTIONS)
    assert loaded is None and entry is not None
    monkeypatch.setattr(qt.config, "dump_ir", None)
    assert disk_cache.lookup(tasks, OPTIONS)[1] is not None


def test_unsafe_directory_warns_once_per_process(tmp_path, monkeypatch):
    os.chmod(tmp_path, 0o777)
    monkeypatch.setattr(qt.config, "cache_dir", str(tmp_path))
    monkeypatch.setattr(qt.config, "offline_cache", True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            assert disk_cache.usable_dir() is None
    assert len([w for w in caught if w.category is QtraceCacheWarning]) == 1


def test_directory_owned_by_another_user_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(qt.config, "cache_dir", str(tmp_path / "c"))
    monkeypatch.setattr(qt.config, "offline_cache", True)
    assert disk_cache.usable_dir() is not None
    monkeypatch.setattr(os, "getuid", lambda: os.stat(tmp_path).st_uid + 12345)
    with pytest.warns(QtraceCacheWarning, match="owned by uid"):
        assert disk_cache.usable_dir() is None


# --------------------------------------------------------------------------- explaining a miss


def test_log_names_the_differing_option(tmp_path):
    first = run_program(tmp_path)
    assert _compiled(first)
    report = run_program(tmp_path, config={"check_bounds": False}, QTRACE_LOG_RECOMPILES="1")
    assert _compiled(report)
    assert "options differ: check_bounds True -> False" in report["stderr"]
    # and with the same options, no miss at all
    again = run_program(tmp_path, QTRACE_LOG_RECOMPILES="1")
    assert _loaded(again) and "compiling" not in again["stderr"]


def test_log_on_first_compile_says_no_entry(tmp_path):
    report = run_program(tmp_path, QTRACE_LOG_RECOMPILES="1")
    assert "no cached entry for these kernels" in report["stderr"]


def test_describe_differences():
    base = disk_cache.components({"fusion": True, "check_bounds": True})
    changed = dict(base, llvm="0.0.1", qtrace="0.0.0+src.0", options={"fusion": True,
                                                                      "check_bounds": False})
    text = "; ".join(disk_cache.describe_differences(base, changed))
    assert "options differ: check_bounds True -> False" in text
    assert f"llvm version differs: {base['llvm']} -> 0.0.1" in text
    assert "qtrace version differs" in text
    assert disk_cache.describe_differences(base, dict(base)) == []


def test_key_covers_every_component():
    opts = {"fusion": True, "check_bounds": True}
    base = disk_cache.components(opts)
    k = disk_cache.entry_key(["a", "b"], base)
    assert k == disk_cache.entry_key(["b", "a"], dict(base))  # order of kernels is irrelevant
    assert k != disk_cache.entry_key(["a"], base)
    for name in base:
        other = dict(base)
        other[name] = {"fusion": True, "check_bounds": False} if name == "options" else "x"
        assert disk_cache.entry_key(["a", "b"], other) != k, name
    assert base["qtrace"].startswith(qt.__version__ + "+src.")
    assert set(llvm_cpu.target_info()) <= set(base)


def test_log_in_process_uses_the_qtrace_logger(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(qt.config, "cache_dir", str(tmp_path))
    monkeypatch.setattr(qt.config, "offline_cache", True)
    monkeypatch.setattr(qt.config, "log_recompiles", True)
    c = float(int.from_bytes(os.urandom(3), "little"))  # a kernel no other test compiled
    x = qt.asarray(np.arange(8.0))
    with caplog.at_level(logging.WARNING, logger="qtrace"):
        np.testing.assert_array_equal((x * c + 1.0).numpy(), np.arange(8.0) * c + 1.0)
    assert any(r.name == "qtrace" and "no cached entry" in r.getMessage() for r in caplog.records)
    assert len(entry_files(tmp_path)) == 1


# --------------------------------------------------------------------------- threads


def test_threads_racing_on_one_entry(tmp_path, monkeypatch):
    """Writers and readers of one entry in several threads (bypassing the runtime's
    lock): every read is a miss or the whole valid entry, never a warning."""
    monkeypatch.setattr(qt.config, "cache_dir", str(tmp_path))
    monkeypatch.setattr(qt.config, "offline_cache", True)
    tasks, obj = _unique_object()
    results, errors = [], []

    def worker():
        try:
            for _ in range(20):
                entry, loaded = disk_cache.lookup(tasks, OPTIONS)
                results.append(loaded is not None)
                entry.store(obj)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    assert not [w for w in caught if w.category is QtraceCacheWarning]
    assert any(results)
    (entry,) = entry_files(tmp_path)
    assert_valid_entry(entry)


# --------------------------------------------------------------------------- command line


def _cli(cache_dir, *args, **env) -> str:
    p = subprocess.run([sys.executable, "-m", "qtrace", *args], env=_env(cache_dir, **env),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_cache_info_and_clear(tmp_path):
    out = _cli(tmp_path, "cache", "info")
    assert str(tmp_path / "kernels") in out and "entries    0" in out
    run_program(tmp_path)
    entry = single_entry(tmp_path)
    out = _cli(tmp_path, "cache", "info")
    assert "entries    1" in out and "state      enabled" in out
    assert f"({os.path.getsize(entry)} bytes)" in out
    (tmp_path / "kernels" / ".leftover-x.tmp").write_bytes(b"partial")
    (tmp_path / "kernels" / "not-ours.txt").write_bytes(b"keep me")
    out = _cli(tmp_path, "cache", "clear")
    assert "removed 2 file(s)" in out
    assert os.listdir(tmp_path / "kernels") == ["not-ours.txt"]
    assert "entries    0" in _cli(tmp_path, "cache", "info")


def test_cache_info_reports_a_refused_directory(tmp_path):
    run_program(tmp_path)
    os.chmod(tmp_path, 0o777)
    assert "REFUSED" in _cli(tmp_path, "cache", "info")


def test_info_still_works(tmp_path):
    out = _cli(tmp_path, "info")
    assert "qtrace" in out and "cache" in out


def _cache_command(monkeypatch, capsys, cache_dir, action: str) -> tuple[int, str, str]:
    """``python -m qtrace cache <action>`` in this process, on ``cache_dir``."""
    from qtrace.__main__ import main

    monkeypatch.setattr(qt.config, "cache_dir", str(cache_dir))
    status = main(["cache", action])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize("action", ["info", "clear"])
@pytest.mark.parametrize("broken", ["root is a file", "kernels is a file", "parent is a file"])
def test_cache_command_on_a_file_where_a_directory_should_be(tmp_path, monkeypatch, capsys, action,
                                                             broken):
    if broken == "root is a file":
        cache_dir = blocker = tmp_path / "cache"
    elif broken == "kernels is a file":
        cache_dir, blocker = tmp_path, tmp_path / "kernels"
    else:
        blocker = tmp_path / "parent"
        cache_dir = blocker / "cache"
    blocker.write_text("not a directory")
    status, out, err = _cache_command(monkeypatch, capsys, cache_dir, action)
    assert status == 1 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{blocker} is a file, not a directory" in err and "QTRACE_CACHE_DIR" in err
    assert blocker.read_text() == "not a directory"  # nothing touched


@pytest.mark.parametrize("action", ["info", "clear"])
def test_cache_command_on_an_unreadable_directory(tmp_path, monkeypatch, capsys, action):
    (tmp_path / "kernels").mkdir(mode=0o700)
    real = os.listdir

    def listdir(path="."):
        if os.fspath(path) == str(tmp_path / "kernels"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "listdir", listdir)  # chmod 000 does not stop root
    status, out, err = _cache_command(monkeypatch, capsys, tmp_path, action)
    assert status == 1 and out == "" and err.count("\n") == 1
    assert f"permission denied listing {tmp_path / 'kernels'}" in err


def test_cache_command_counts_and_clears_corrupt_entries(tmp_path, monkeypatch, capsys):
    run_program(tmp_path)
    entry = single_entry(tmp_path)
    kernels = tmp_path / "kernels"
    (kernels / ("0" * 16 + "-garbage" + disk_cache.SUFFIX)).write_bytes(b"\x00garbage")
    (kernels / ("1" * 16 + "-truncated" + disk_cache.SUFFIX)).write_bytes(b'{"format": "qtr')
    (kernels / ("2" * 16 + "-a-directory" + disk_cache.SUFFIX)).mkdir()
    status, out, _ = _cache_command(monkeypatch, capsys, tmp_path, "info")
    assert status == 0 and "entries    1\n" in out and "corrupt    3 " in out
    status, out, _ = _cache_command(monkeypatch, capsys, tmp_path, "clear")
    assert status == 0 and "removed 3 file(s)" in out and "skipped 1 name(s)" in out
    assert os.listdir(kernels) == ["2" * 16 + "-a-directory" + disk_cache.SUFFIX]
    status, out, _ = _cache_command(monkeypatch, capsys, tmp_path, "info")
    assert "entries    0\n" in out and "corrupt    1 " in out
    assert not os.path.exists(entry)


def test_cache_clear_reports_a_file_it_cannot_remove(tmp_path, monkeypatch, capsys):
    run_program(tmp_path)
    entry = single_entry(tmp_path)

    def unlink(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(os, "unlink", unlink)
    status, out, err = _cache_command(monkeypatch, capsys, tmp_path, "clear")
    assert status == 1 and err.count("\n") == 1
    assert f"permission denied removing {entry}" in err


def test_info_command_reports_a_broken_cache_in_its_cache_line(tmp_path, monkeypatch, capsys):
    from qtrace.__main__ import main

    (tmp_path / "kernels").write_text("")
    monkeypatch.setattr(qt.config, "cache_dir", str(tmp_path))
    assert main(["info"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("cache  ")]
    assert "is a file, not a directory" in line


def test_cache_is_trimmed_to_its_cap_least_recently_used_first(tmp_path):
    """Entries per target make the cache grow: past the cap, the least recently used go."""
    now = time.time()
    for i, age in enumerate((300, 100, 200, 10)):
        p = tmp_path / f"k{i}-key{i}{disk_cache.SUFFIX}"
        p.write_bytes(b"x" * 1000)
        os.utime(p, (now - age, now - age))
    assert disk_cache.trim(str(tmp_path), 2500) == 2
    assert sorted(p.name[:2] for p in tmp_path.iterdir()) == ["k1", "k3"]  # the two newest
    assert disk_cache.trim(str(tmp_path), 2500) == 0


def test_cache_info_reports_the_cap():
    assert disk_cache.info()["cap_bytes"] == qt.config.cache_max_bytes > 0
