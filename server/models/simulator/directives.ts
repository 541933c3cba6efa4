/**
 * The simulator's test directives, `[[...]]` anywhere in a prompt:
 * [[sleep:MS]] answer after MS ms; [[fail]] a non-retryable provider error (HTTP 500);
 * [[fail-once]] that error only on the first call with this exact message text in this process;
 * [[429]] / [[429-once]] a retryable rate limit with `retry-after: 1`; [[chars:N]] an answer of
 * exactly N characters; [[tool:NAME {json}]] call tool NAME with that input, one per model step;
 * [[echo]] answer with the rest of the message verbatim; with a JSON response format,
 * [[json:VALUE]] / [[json-once:VALUE]] answer VALUE verbatim and [[judge-fail]] (or
 * [[judge-fail:REASON]]) makes a judge give 0 (structured.ts); [[wait-after-step:N:MS]] waits MS ms before model step N+1 (steps count
 * from 1), so a test can kill a worker between two steps. Unknown or malformed ones are ignored.
 */

/** The longest answer [[chars:N]] produces; keeps a typo from allocating gigabytes. */
export const SIMULATOR_MAX_CHARS = 10_000_000;
/** Node timers overflow (and fire at once) beyond 2^31-1 ms, so [[sleep]] is clamped there. */
const MAX_SLEEP_MS = 2_147_483_647;

export interface SimulatorDirectives {
  sleepMs?: number;
  fail: boolean;
  failOnce: boolean;
  rateLimit: boolean;
  rateLimitOnce: boolean;
  chars?: number;
}

/** A tool call the simulator makes: from a directive or from the chat grammar. */
export interface SimulatedToolCall {
  toolName: string;
  input: Record<string, unknown>;
}

const DIRECTIVE_RE = /\[\[\s*(sleep|fail|fail-once|429|429-once|chars)\s*(?::\s*(\d+)\s*)?\]\]/gi;
const ECHO_RE = /\[\[\s*echo\s*\]\]/gi;
const WAIT_AFTER_STEP_RE = /\[\[\s*wait-after-step\s*:\s*(\d+)\s*:\s*(\d+)\s*\]\]/gi;
const TOOL_DIRECTIVE_RE = /\[\[tool:([A-Za-z0-9_.:-]+)\s*(\{(?:[^\]]|\](?!\]))*\})?\s*\]\]/g;

/** Reads the test directives from a prompt text. */
export function parseDirectives(text: string): SimulatorDirectives {
  const out: SimulatorDirectives = { fail: false, failOnce: false, rateLimit: false, rateLimitOnce: false };
  for (const match of text.matchAll(DIRECTIVE_RE)) {
    const name = match[1].toLowerCase();
    const arg = match[2] === undefined ? undefined : Number(match[2]);
    if (name === "sleep" && arg !== undefined) out.sleepMs = Math.min(arg, MAX_SLEEP_MS);
    else if (name === "chars" && arg !== undefined) out.chars = Math.min(arg, SIMULATOR_MAX_CHARS);
    else if (name === "fail" && arg === undefined) out.fail = true;
    else if (name === "fail-once" && arg === undefined) out.failOnce = true;
    else if (name === "429" && arg === undefined) out.rateLimit = true;
    else if (name === "429-once" && arg === undefined) out.rateLimitOnce = true;
  }
  return out;
}

/** The text without its test directives (each becomes a space). */
export function stripDirectives(text: string): string {
  return stripJsonDirectives(
    text.replace(DIRECTIVE_RE, " ").replace(ECHO_RE, " ").replace(TOOL_DIRECTIVE_RE, " ").replace(WAIT_AFTER_STEP_RE, " "),
  );
}

/** [[wait-after-step:N:MS]]: the wait before model step `step` (1-based), 0 when none applies. */
export function waitBeforeStep(text: string, step: number): number {
  let ms = 0;
  for (const m of text.matchAll(WAIT_AFTER_STEP_RE)) if (Number(m[1]) + 1 === step) ms += Number(m[2]);
  return Math.min(ms, MAX_SLEEP_MS);
}

const JUDGE_FAIL_RE = /\[\[\s*judge-fail\s*(?::((?:[^\]]|\](?!\]))*))?\]\]/gi;

/**
 * [[judge-fail]] / [[judge-fail:REASON]]: a judge grading this item gives 0, with REASON as its
 * reason when given (null without one, undefined when the text holds neither). In REASON, `\uXXXX`
 * stands for that UTF-16 code unit, however many backslashes quoting added before it, so a test can
 * hand a judge's reason any character (U+0000, a lone surrogate).
 */
export function judgeFailReason(text: string): string | null | undefined {
  const m = new RegExp(JUDGE_FAIL_RE.source, "i").exec(text);
  if (!m) return undefined;
  if (m[1] === undefined) return null;
  return m[1].replace(/\\+u([0-9a-fA-F]{4})/g, (_, hex: string) => String.fromCharCode(Number.parseInt(hex, 16)));
}

const JSON_OPEN_RE = /\[\[json(-once)?:/i;
/** How many "]]" a VALUE may run past while looking for one that parses as JSON. */
const MAX_CLOSE_TRIES = 32;

export interface JsonDirective {
  once: boolean;
  value: string;
  /** Where the directive starts and ends (after its "]]") in the text. */
  start: number;
  end: number;
}

/**
 * The first [[json:VALUE]] / [[json-once:VALUE]] of a text. VALUE ends at the first "]]" after
 * which it parses as JSON (so `[[json:[[1]]]]` is `[[1]]`), else at the first "]]" (verbatim,
 * not JSON).
 */
export function parseJsonDirective(text: string): JsonDirective | undefined {
  const open = JSON_OPEN_RE.exec(text);
  if (!open) return undefined;
  const from = open.index + open[0].length;
  const first = text.indexOf("]]", from);
  if (first < 0) return undefined;
  const at = (close: number) => ({ once: open[1] !== undefined, value: text.slice(from, close).trim(), start: open.index, end: close + 2 });
  let close = first;
  for (let tries = 0; close >= 0 && tries < MAX_CLOSE_TRIES; tries++, close = text.indexOf("]]", close + 1)) {
    try {
      JSON.parse(text.slice(from, close));
      return at(close);
    } catch {
      // Not JSON yet: a later "]]" may close it.
    }
  }
  return at(first);
}

/** Removes every [[json...]] directive and [[judge-fail...]] (each becomes a space). */
function stripJsonDirectives(text: string): string {
  let out = text.replace(JUDGE_FAIL_RE, " ");
  for (let d = parseJsonDirective(out); d; d = parseJsonDirective(out)) out = `${out.slice(0, d.start)} ${out.slice(d.end)}`;
  return out;
}

/** The message with [[echo]] removed, when it has one: the answer verbatim. */
export function echoText(text: string): string | undefined {
  if (!new RegExp(ECHO_RE.source, "i").test(text)) return undefined;
  return text.replace(ECHO_RE, "").trim();
}

/** Reads one JSON object starting at `start` (which must be "{"); returns its end index (exclusive). */
function scanJsonObject(text: string, start: number): number | undefined {
  if (text[start] !== "{") return undefined;
  let depth = 0;
  let inString = false;
  for (let i = start; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === "\\") i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === "{") depth++;
    else if (c === "}") {
      depth--;
      if (depth === 0) return i + 1;
    }
  }
  return undefined;
}

/**
 * Every `[[<opener>NAME {json}]]` of a text, in order, for the names `accept` takes ({} when the
 * JSON is left out), and the text with them removed (each becomes a space). The JSON is scanned
 * as JSON, so "]]" inside a string is fine; a malformed one is left in the text.
 */
export function scanCallDirectives(
  text: string,
  opener: "tool" | "call",
  accept: (toolName: string) => boolean = () => true,
): { calls: SimulatedToolCall[]; rest: string } {
  const calls: SimulatedToolCall[] = [];
  let rest = "";
  let cursor = 0;
  const re = opener === "tool" ? /\[\[tool:([A-Za-z0-9_.:-]+)\s*/g : /\[\[call:([A-Za-z0-9_-]+)\s*/g;
  for (let m = re.exec(text); m; m = re.exec(text)) {
    let end = m.index + m[0].length;
    let input: Record<string, unknown> = {};
    if (text[end] === "{") {
      const jsonEnd = scanJsonObject(text, end);
      if (jsonEnd === undefined) continue;
      try {
        const parsed = JSON.parse(text.slice(end, jsonEnd));
        if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) continue;
        input = parsed;
      } catch {
        continue;
      }
      end = jsonEnd;
    }
    const close = /^\s*\]\]/.exec(text.slice(end));
    if (!close || !accept(m[1])) continue;
    end += close[0].length;
    calls.push({ toolName: m[1], input });
    rest += `${text.slice(cursor, m.index)} `;
    cursor = end;
    re.lastIndex = end;
  }
  rest += text.slice(cursor);
  return { calls, rest };
}

/** The [[tool:NAME {json}]] directives of a message, in order, and the message without them. */
export function parseToolDirectives(text: string): { calls: SimulatedToolCall[]; rest: string } {
  return scanCallDirectives(text, "tool");
}
