import { parseApprovalPattern } from "@/lib/approval-pattern";
import { compileGlob } from "@/lib/glob";

/**
 * Which tool calls wait for a person (DESIGN "Approvals"). A pattern is `group` or
 * `group/tool-glob` (syntax: lib/approval-pattern.ts). A call matches when its group is the
 * pattern's and the glob (linear-time, lib/glob.ts) matches the tool's name as the model sees
 * it; an MCP tool (`<server>__<tool>`) also matches by its own name, so `mcp:fs/write_*` means
 * what it reads as. Patterns come from validated config, so they compile.
 */
export type ApprovalMatcher = (group: string, toolName: string) => boolean;

/** A matcher that never matches (no patterns): callers skip the approval wrapping. */
export const NO_APPROVAL: ApprovalMatcher = () => false;

export function approvalMatcher(patterns: readonly string[]): ApprovalMatcher {
  if (patterns.length === 0) return NO_APPROVAL;
  const byGroup = new Map<string, ((name: string) => boolean)[]>();
  for (const p of new Set(patterns)) {
    const { group, glob } = parseApprovalPattern(p);
    const list = byGroup.get(group) ?? [];
    list.push(glob === null ? () => true : compileGlob(glob));
    byGroup.set(group, list);
  }
  return (group, toolName) => {
    const tests = byGroup.get(group);
    if (!tests) return false;
    const names = [toolName];
    if (group.startsWith("mcp:")) {
      const prefix = `${group.slice(4)}__`;
      if (toolName.startsWith(prefix)) names.push(toolName.slice(prefix.length));
    }
    return tests.some((test) => names.some(test));
  };
}

/**
 * The matcher for one run of the definition called `definitionName`: tools.require_approval and
 * that definition's own patterns in the current configuration (a policy added after a batch was
 * submitted applies to its later calls too).
 */
export function approvalMatcherFor(
  config: { tools: { require_approval: readonly string[] }; subagents: { definitions: readonly { name: string; require_approval: readonly string[] }[] } },
  definitionName: string,
): ApprovalMatcher {
  const def = config.subagents.definitions.find((d) => d.name === definitionName);
  return approvalMatcher(runApprovalPatterns(config, def?.require_approval));
}

/** The patterns that apply to one run: the global list and its definition's own. */
export function runApprovalPatterns(
  config: { tools: { require_approval: readonly string[] } },
  definitionPatterns: readonly string[] | undefined,
): string[] {
  return [...config.tools.require_approval, ...(definitionPatterns ?? [])];
}
