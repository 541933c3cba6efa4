import { AppError } from "@/server/errors";
import { CompatParamError } from "./errors";

/**
 * The body of an Anthropic batch create, `{ "requests": [ ... ], ... }`, read with bounded
 * memory: a scanner walks the bytes once and hands out each element of `requests` as its own
 * JSON text (parsed and validated by the caller, one at a time). Only the envelope's structure
 * is checked here; each element and every other top-level value goes through JSON.parse, and
 * none may be larger than `maxValueBytes` (413 naming `limitName`).
 */

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const isSpace = (b: number) => b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;

const invalid = () => new AppError("invalid_json", "request body is not valid JSON");

type Mode = "start" | "key" | "colon" | "value" | "after-value" | "element" | "after-element" | "end";

export async function* requestElements(
  chunks: AsyncIterable<Uint8Array>,
  limits: { maxValueBytes: number; limitName: string },
): AsyncGenerator<string> {
  let mode: Mode = "start";
  let keys = 0;
  let sawRequests = false;
  let inRequests = false; // the value being read is `requests`
  let elements = 0;
  // The value (key, element or other top-level value) being captured.
  let parts: Uint8Array[] = [];
  let size = 0;
  let capturing = false;
  let inString = false;
  let escaped = false;
  let nesting = 0;
  let key: string | null = null;

  const tooLarge = () =>
    new AppError(
      "payload_too_large",
      `${inRequests ? `requests.${elements}` : "a top-level value"}: larger than ${limits.limitName} (${limits.maxValueBytes} bytes)`,
    );
  const take = (): string => {
    const text = Buffer.concat(parts, size).toString("utf8").trimEnd();
    parts = [];
    size = 0;
    capturing = false;
    return text;
  };

  for await (const chunk of chunks) {
    let from = capturing ? 0 : -1; // where the captured part of this chunk starts
    for (let i = 0; i < chunk.length; i++) {
      const b = chunk[i]!;
      if (capturing) {
        if (inString) {
          if (escaped) escaped = false;
          else if (b === BACKSLASH) escaped = true;
          else if (b === QUOTE) {
            inString = false;
            if (mode === "key") {
              // The key's closing quote: the key is complete.
              parts.push(chunk.subarray(from, i + 1));
              size += i + 1 - from;
              from = -1;
              const text = take();
              try {
                key = JSON.parse(text) as string;
              } catch {
                throw invalid();
              }
              mode = "colon";
            }
          }
          continue;
        }
        if (b === QUOTE) {
          inString = true;
          continue;
        }
        if (b === 0x7b || b === 0x5b) nesting++;
        else if (nesting > 0 && (b === 0x7d || b === 0x5d)) nesting--;
        else if (nesting === 0 && (b === 0x2c || b === 0x5d || b === 0x7d)) {
          // The end of a value: a comma, or the bracket closing its container.
          parts.push(chunk.subarray(from, i));
          size += i - from;
          from = -1;
          if (size > limits.maxValueBytes) throw tooLarge();
          const text = take();
          if (text === "") throw invalid();
          let value: unknown;
          try {
            value = JSON.parse(text);
          } catch {
            throw invalid();
          }
          if (mode === "element") {
            yield text;
            elements++;
            if (b === 0x7d) throw invalid();
            if (b === 0x5d) {
              inRequests = false;
              mode = "after-value";
            }
            // After a comma the next element follows.
            continue;
          }
          // Another top-level value: parsed (so the body is valid JSON) and dropped.
          void value;
          if (b === 0x5d) throw invalid();
          mode = b === 0x2c ? "key" : "end";
          continue;
        }
        continue;
      }
      if (isSpace(b)) continue;
      switch (mode) {
        case "start":
          if (b !== 0x7b) throw new CompatParamError("requests", "the body must be a JSON object with `requests`");
          mode = "key";
          break;
        case "key":
          if (b === 0x7d && keys === 0) {
            mode = "end";
            break;
          }
          if (b !== QUOTE) throw invalid();
          capturing = true;
          inString = true;
          from = i;
          break;
        case "colon":
          if (b !== 0x3a) throw invalid();
          keys++;
          mode = "value";
          break;
        case "value":
          if (key === "requests") {
            if (sawRequests) throw new CompatParamError("requests", "requests: given more than once");
            sawRequests = true;
            if (b !== 0x5b) throw new CompatParamError("requests", "requests: must be an array");
            inRequests = true;
            mode = "after-element";
            break;
          }
          capturing = true;
          nesting = 0;
          from = i;
          i--; // the first byte is read again as part of the value
          break;
        case "after-element":
          // Just after `[`: an element, or `]` for an empty array.
          if (b === 0x5d) {
            inRequests = false;
            mode = "after-value";
            break;
          }
          mode = "element";
          capturing = true;
          nesting = 0;
          from = i;
          i--;
          break;
        case "after-value":
          if (b === 0x2c) mode = "key";
          else if (b === 0x7d) mode = "end";
          else throw invalid();
          break;
        case "end":
          throw invalid();
        case "element":
          // Between elements (after a comma): the next one starts here.
          capturing = true;
          nesting = 0;
          from = i;
          i--;
          break;
      }
    }
    if (capturing && from >= 0) {
      parts.push(chunk.subarray(from));
      size += chunk.length - from;
    }
    if (size > limits.maxValueBytes) throw tooLarge();
  }
  if (mode !== "end" || capturing) throw invalid();
  if (!sawRequests) throw new CompatParamError("requests", "requests: at least one request is required");
}
