"""What the benchmarks that drive wrk share: its Lua pacing (a fixed offered rate) and the
parsing of its latency figures."""

from __future__ import annotations

_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}

# wrk's Lua `delay()` keeps a schedule of one request every 1/rate s over its connections.
_PACING = """
local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clock, bench_timespec *now);
]]
local now = ffi.new("bench_timespec")
local function now_ms()
  ffi.C.clock_gettime(1, now)  -- CLOCK_MONOTONIC
  return tonumber(now.tv_sec) * 1000 + tonumber(now.tv_nsec) / 1e6
end
local slot = nil
delay = function()  -- one slot per request, every 1/rate s, whatever the answers took
  local t = now_ms()
  slot = (slot or t) + INTERVAL_MS
  return math.max(0, slot - t)
end
"""


def paced(script: str, rate: float | None) -> str:
    """A wrk Lua script that offers `rate` requests/s (`None`: as fast as answers come)."""
    return script + (_PACING.replace("INTERVAL_MS", repr(1000.0 / rate)) if rate else "")


def millis(text: str) -> float:
    """A wrk latency figure (`812.00us`, `3.21ms`, `1.02s`) in milliseconds."""
    number = text.rstrip("usm")
    return float(number) * _UNITS[text[len(number) :]]
