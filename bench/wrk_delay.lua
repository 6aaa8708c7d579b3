-- Paces each wrk connection: one request every `delay_ms` (TACOD_DELAY_MS,
-- default 10), so N connections offer about N * 1000 / delay_ms requests/s.
local d = tonumber(os.getenv("TACOD_DELAY_MS") or "10")
function delay()
  return d
end
