import { z } from "zod";

/** Wire shapes of the approvals of tool calls that wait for a person (DESIGN "Approvals"). */

export const approvalDecisionSchema = z.enum(["approve", "deny"], { error: 'must be "approve" or "deny"' });

/** Most characters of a denial's reason (the model reads it as the tool's error). */
export const APPROVAL_REASON_MAX_CHARS = 2_000;

/** POST .../items/{item_id}/approval */
export const itemApprovalSchema = z
  .object({
    decision: approvalDecisionSchema,
    reason: z.string().max(APPROVAL_REASON_MAX_CHARS, { error: `must be at most ${APPROVAL_REASON_MAX_CHARS} characters` }).optional(),
  })
  .strict();

/** POST .../subagent-batches/{id}/approvals: one decision for every waiting call of `tool` (its name as the model sees it). */
export const batchApprovalsSchema = z
  .object({
    tool: z.string().min(1, { error: "must name a tool" }).max(256, { error: "must be at most 256 characters" }),
    decision: approvalDecisionSchema,
    reason: z.string().max(APPROVAL_REASON_MAX_CHARS, { error: `must be at most ${APPROVAL_REASON_MAX_CHARS} characters` }).optional(),
  })
  .strict();

export const batchApprovalsResultSchema = z.object({ decided: z.number().int() }).strict();
