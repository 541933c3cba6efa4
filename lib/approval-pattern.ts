import { z } from "zod";
import { compileGlob, GlobError } from "./glob";

/**
 * The syntax of an approval pattern (`tools.require_approval`, a definition's
 * `require_approval`): `group` (every tool of the group) or `group/tool-glob` (the tools of the
 * group whose name matches the glob, e.g. `mcp:fs/write_*`, `workspace/write_file`). Group
 * names never hold a slash, so the first one splits. Pure: the config schema checks patterns
 * with it; the matcher is server/tools/approval.ts.
 */
export interface ApprovalPattern {
  group: string;
  /** null = every tool of the group. */
  glob: string | null;
}

export function parseApprovalPattern(pattern: string): ApprovalPattern {
  const slash = pattern.indexOf("/");
  return slash < 0 ? { group: pattern, glob: null } : { group: pattern.slice(0, slash), glob: pattern.slice(slash + 1) };
}

/** The group a pattern names (checked against the known groups at start). */
export const approvalPatternGroup = (pattern: string): string => parseApprovalPattern(pattern).group;

/** One pattern, as the config accepts it: a group name, optionally a slash and a glob that compiles. */
export const approvalPatternSchema = z
  .string()
  .min(1, { error: 'must be "group" or "group/tool-glob"' })
  .max(512, { error: "must be at most 512 characters" })
  .superRefine((p, ctx) => {
    const { group, glob } = parseApprovalPattern(p);
    if (!group) ctx.addIssue({ code: "custom", message: `"${p}": names no tool group (use "group" or "group/tool-glob")` });
    if (glob === null) return;
    if (!glob) {
      ctx.addIssue({ code: "custom", message: `"${p}": the tool glob after "/" is empty` });
      return;
    }
    try {
      compileGlob(glob);
    } catch (err) {
      if (!(err instanceof GlobError)) throw err;
      ctx.addIssue({ code: "custom", message: `"${p}": ${err.message}` });
    }
  });
