/**
 * The client's one set of formatters (the chat's cards and the batch panel print durations,
 * token counts, money and times the same way).
 */

const pad = (n: number) => String(n).padStart(2, "0");

/** 850 ms, 1.5 s, 42 s, 3 min 05 s, 2 h 07 min; "—" when unknown. */
export function formatDuration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms) || ms < 0) return "—";
  if (ms < 1_000) return `${Math.round(ms)} ms`;
  if (ms < 10_000) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${pad(s % 60)} s`;
  return `${Math.floor(m / 60)} h ${pad(m % 60)} min`;
}

/** 950, 12.3k, 4.1M. */
export function formatTokens(n: number): string {
  if (!Number.isFinite(n) || n < 0) return "0";
  if (n < 1_000) return String(Math.round(n));
  if (n < 1_000_000) return `${(n / 1_000).toFixed(1)}k`;
  return `${(n / 1_000_000).toFixed(1)}M`;
}

/** "12.3k in · 456 out", then "· 10.0k cached" when part of the input was read from the provider's prompt cache. */
export function formatUsage(u: { input_tokens: number; output_tokens: number; cached_input_tokens?: number }): string {
  const line = `${formatTokens(u.input_tokens)} in · ${formatTokens(u.output_tokens)} out`;
  return (u.cached_input_tokens ?? 0) > 0 ? `${line} · ${formatTokens(u.cached_input_tokens ?? 0)} cached` : line;
}

/** 1,234 (en-US grouping everywhere, so numbers read alike whatever the browser's locale). */
export function formatCount(n: number): string {
  return Number.isFinite(n) ? Math.round(n).toLocaleString("en-US") : "0";
}

/** 12.3/s at speed, 4.5/min when slow. */
export function formatRate(perSecond: number | null): string {
  if (perSecond === null || !Number.isFinite(perSecond)) return "—";
  if (perSecond >= 1) return `${perSecond.toFixed(1)}/s`;
  return `${(perSecond * 60).toFixed(1)}/min`;
}

/** $0.0123 below a dollar, $4.56 above. */
export function formatUsd(n: number): string {
  return `$${n < 1 ? n.toFixed(4) : n.toFixed(2)}`;
}

/**
 * A moment as the panel shows it: the time of day (24 h, with seconds) when it is today,
 * with a short date otherwise ("14:03:07", "28 Nov 14:03"). `now` makes it testable.
 */
export function formatTime(iso: string | null | undefined, now: number = Date.now()): string {
  if (!iso) return "—";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return "—";
  const time = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
  if (d.toDateString() === new Date(now).toDateString()) return `${time}:${pad(d.getSeconds())}`;
  const month = d.toLocaleString("en-US", { month: "short" });
  const year = d.getFullYear() === new Date(now).getFullYear() ? "" : ` ${d.getFullYear()}`;
  return `${d.getDate()} ${month}${year} ${time}`;
}
