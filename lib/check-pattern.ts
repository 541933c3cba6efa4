import { RE2JS } from "re2js";

/**
 * A regex check's pattern (lib/api/batch-data.ts regexCheckSchema), compiled with RE2: user
 * patterns match in time linear in the text, so `(a+)+$` is harmless, and what RE2 cannot
 * express (backreferences, lookaround) is refused at submission. The one compilation the
 * submission check and the checks runner share. Flags: i, m, s as in JavaScript; u is always on.
 */
export function compileCheckPattern(pattern: string, flags = ""): RE2JS {
  let bits = 0;
  if (flags.includes("i")) bits |= RE2JS.CASE_INSENSITIVE;
  if (flags.includes("m")) bits |= RE2JS.MULTILINE;
  if (flags.includes("s")) bits |= RE2JS.DOTALL;
  return RE2JS.compile(pattern, bits);
}

/** Why the pattern does not compile under RE2, or null. */
export function checkPatternProblem(pattern: string, flags?: string): string | null {
  try {
    compileCheckPattern(pattern, flags);
    return null;
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
}
