"""convert/allocator.py: a conversion keeps freed heap memory (glibc), and a MALLOC_*_ variable the user set wins."""

from __future__ import annotations


class FakeLibc:
    def __init__(self):
        self.calls = []

        def mallopt(param, value):
            self.calls.append((param, value))
            return 1

        self.mallopt = mallopt


def test_the_settings_skip_what_the_user_set_and_apply_once(monkeypatch):
    import dpconvert.allocator as allocator

    libc = FakeLibc()
    monkeypatch.setattr(allocator.ctypes, "CDLL", lambda name: libc)
    monkeypatch.setattr(allocator, "_done", False)
    monkeypatch.setenv("MALLOC_TOP_PAD_", "0")
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert allocator.keep_freed_memory()
    assert [p for p, _ in libc.calls] == [allocator.M_TRIM_THRESHOLD, allocator.M_MMAP_THRESHOLD]
    assert all(0 < v < 2**31 for _, v in libc.calls)  # mallopt takes an int
    assert allocator.keep_freed_memory() and len(libc.calls) == 2  # once per process


def test_without_glibc_nothing_is_set(monkeypatch):
    import dpconvert.allocator as allocator

    def no_libc(name):
        raise OSError("no libc")

    monkeypatch.setattr(allocator.ctypes, "CDLL", no_libc)
    monkeypatch.setattr(allocator, "_done", False)
    assert allocator.keep_freed_memory() is False
