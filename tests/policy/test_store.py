"""webhook.policy.store: the policies in force while serving, reloaded when a file of the folder
changes (name, inode, size or mtime), all or nothing, with its metrics and log lines."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from prometheus_client import REGISTRY

from webhook.policy import store as store_module
from webhook.policy.store import PolicyStore

ROOT = Path(__file__).resolve().parent.parent.parent
ERDMA = (ROOT / "policies" / "erdma.yaml").read_text()


def named(name: str) -> str:
    return ERDMA.replace("\nname: erdma\n", f"\nname: {name}\n", 1)


def broken(name: str) -> str:
    text = named(name).replace("\npriority: 10\n", "\npriority: high\n", 1)
    assert text != named(name)
    return text


def reloads(result: str) -> float:
    return REGISTRY.get_sample_value("rdma_webhook_policy_reloads_total", {"result": result}) or 0.0


def gauge(name: str) -> float | None:
    return REGISTRY.get_sample_value(name)


def test_a_new_store_holds_nothing_and_polls_every_two_seconds(tmp_path):
    store = PolicyStore(str(tmp_path))
    assert store.directory == tmp_path and store.interval == 2.0
    assert store.current is None and store.last_errors == []


def test_a_reload_loads_the_folder_once_until_a_file_changes(tmp_path):
    (tmp_path / "a.yaml").write_text(named("first"))
    store = PolicyStore(tmp_path)
    before = reloads("success")
    assert store.reload() is True and set(store.current.by_name) == {"first"}
    assert reloads("success") == before + 1
    assert gauge("rdma_webhook_policy_last_reload_success") == 1
    assert gauge("rdma_webhook_policies_loaded") == 1
    loaded = store.current
    assert store.reload() is False and store.current is loaded and reloads("success") == before + 1
    # forced: loaded again although nothing changed
    assert store.reload(force=True) is True and store.current is not loaded
    assert reloads("success") == before + 2


def test_each_kind_of_change_of_a_file_is_seen(tmp_path):
    path = tmp_path / "a.yaml"
    path.write_text(named("first"))
    store = PolicyStore(tmp_path)
    assert store.reload()
    stat = os.stat(path)
    # the same size, a later mtime
    path.write_text(named("secnd"))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert store.reload() and set(store.current.by_name) == {"secnd"}
    # the same size and mtime, another inode (a ConfigMap's swap writes new files)
    stat = os.stat(path)
    other = tmp_path / ".tmp"
    other.write_text(named("third"))
    os.utime(other, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    os.replace(other, path)
    assert os.stat(path).st_ino != stat.st_ino
    assert store.reload() and set(store.current.by_name) == {"third"}
    # the same size and mtime, another size
    stat = os.stat(path)
    path.write_text(named("fourth"))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert store.reload() and set(store.current.by_name) == {"fourth"}
    # a file renamed, its stat unchanged
    os.rename(path, tmp_path / "b.yaml")
    assert store.reload() is True
    # a second file
    (tmp_path / "c.yaml").write_text(named("fifth"))
    assert store.reload() and set(store.current.by_name) == {"fourth", "fifth"}
    assert gauge("rdma_webhook_policies_loaded") == 2


def test_a_file_other_than_a_policy_is_no_change(tmp_path):
    (tmp_path / "a.yaml").write_text(named("first"))
    store = PolicyStore(tmp_path)
    assert store.reload()
    (tmp_path / "README.md").write_text("notes")
    assert store.reload() is False


def test_an_invalid_folder_keeps_the_last_good_policies_and_says_why(tmp_path, caplog):
    (tmp_path / "a.yaml").write_text(named("good"))
    store = PolicyStore(tmp_path)
    assert store.reload()
    good = store.current
    before = reloads("failure")
    (tmp_path / "a.yaml").write_text(broken("bad"))
    with caplog.at_level(logging.ERROR, logger="rdma_webhook.policies"):
        assert store.reload() is False
    assert store.current is good
    expected = f"{tmp_path / 'a.yaml'}: policy 'bad': field priority: 'high' is not of type 'integer'"
    assert store.last_errors == [expected]
    assert reloads("failure") == before + 1
    assert gauge("rdma_webhook_policy_last_reload_success") == 0
    (record,) = [r for r in caplog.records if r.name == "rdma_webhook.policies"]
    assert record.levelno == logging.ERROR
    assert record.getMessage() == f"policy reload rejected; keeping the last good policies: {expected}"
    assert (record.file, record.policy, record.field) == (str(tmp_path / "a.yaml"), "bad", "priority")
    # the same invalid folder is not loaded (nor logged) again
    caplog.clear()
    assert store.reload() is False and reloads("failure") == before + 1 and not caplog.records
    # fixed: loaded, the errors cleared
    (tmp_path / "a.yaml").write_text(named("fixed"))
    assert store.reload() and set(store.current.by_name) == {"fixed"} and store.last_errors == []
    assert gauge("rdma_webhook_policy_last_reload_success") == 1


def test_the_loaded_policies_are_logged_by_name_and_an_empty_folder_warned_of(tmp_path, caplog):
    (tmp_path / "b.yaml").write_text(named("zeta"))
    (tmp_path / "a.yaml").write_text(named("alpha") + "---\n" + named("mid"))
    store = PolicyStore(tmp_path)
    with caplog.at_level(logging.INFO, logger="rdma_webhook.policies"):
        assert store.reload()
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "policies loaded: alpha, mid, zeta")
    ]
    caplog.clear()
    for path in tmp_path.iterdir():
        path.unlink()
    with caplog.at_level(logging.INFO, logger="rdma_webhook.policies"):
        assert store.reload()
    assert len(store.current) == 0 and gauge("rdma_webhook_policies_loaded") == 0
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and record.getMessage() == (
        "no policy in force (the folder holds none): labelled pods in opted-in namespaces are "
        "denied until the platform team chooses one"
    )


def test_a_missing_folder_is_a_failed_reload_until_it_appears(tmp_path):
    folder = tmp_path / "policies"
    store = PolicyStore(folder)
    assert store.reload() is False and store.current is None
    assert store.last_errors == [f"{folder}: cannot read the policies folder: No such file or directory"]
    folder.mkdir()
    (folder / "a.yaml").write_text(named("late"))
    assert store.reload() and set(store.current.by_name) == {"late"}


def test_a_file_that_vanishes_between_listing_and_stat_is_left_out(tmp_path, monkeypatch):
    (tmp_path / "a.yaml").write_text(named("one"))
    (tmp_path / "b.yaml").write_text(named("two"))
    store = PolicyStore(tmp_path)
    real_stat = os.stat

    def stat(path, *args, **kwargs):
        if Path(path).name == "a.yaml":
            raise FileNotFoundError(path)
        return real_stat(path, *args, **kwargs)

    # the store's own os.stat only: the listing (pathlib's) still sees both files
    monkeypatch.setattr(store_module, "os", SimpleNamespace(stat=stat))
    signature = store._stat_signature()
    assert [entry[0] for entry in signature] == ["b.yaml"]
    st = real_stat(tmp_path / "b.yaml")
    assert signature == (("b.yaml", st.st_ino, st.st_size, st.st_mtime_ns),)


def test_the_watcher_reloads_in_a_daemon_thread_and_survives_a_crash(tmp_path, caplog):
    (tmp_path / "a.yaml").write_text(named("first"))
    store = PolicyStore(tmp_path, interval=0.02)
    calls = []
    real_reload = store.reload

    def reload(force=False):
        calls.append(threading.current_thread())
        if len(calls) == 1:
            raise RuntimeError("boom")
        return real_reload(force)

    store.reload = reload
    with caplog.at_level(logging.ERROR, logger="rdma_webhook.policies"):
        store.start()
        thread = store._thread
        store.start()  # a second start keeps the one thread
        assert store._thread is thread
        assert thread.daemon and thread.name == "policy-reload"
        deadline = time.monotonic() + 10
        while store.current is None and time.monotonic() < deadline:
            time.sleep(0.01)
        store.stop()
        thread.join(5)
    assert not thread.is_alive()
    assert set(store.current.by_name) == {"first"}
    assert calls[0] is thread and len(calls) >= 2
    assert any(r.getMessage() == "policy reload crashed" and r.exc_info for r in caplog.records)


def test_the_watcher_waits_its_interval_before_the_first_poll(tmp_path):
    (tmp_path / "a.yaml").write_text(named("first"))
    store = PolicyStore(tmp_path, interval=30)
    store.start()
    time.sleep(0.2)
    assert store.current is None
    store.stop()
    store._thread.join(5)
    assert not store._thread.is_alive()


def test_a_folder_that_fails_another_way_is_read_again(tmp_path):
    folder = tmp_path / "policies"
    store = PolicyStore(folder)
    assert store.reload() is False
    assert store.last_errors == [f"{folder}: cannot read the policies folder: No such file or directory"]
    folder.write_text("a file, not a folder")
    assert store.reload() is False
    assert store.last_errors == [f"{folder}: cannot read the policies folder: Not a directory"]
