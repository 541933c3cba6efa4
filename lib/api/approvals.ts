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

/** GET .../subagent-batches/{id}/approvals: the calls waiting for a person, oldest first (at most 100). */
export const waitingApprovalSchema = z
  .object({
    item_id: z.string(),
    item_key: z.string(),
    tool: z.string(),
    /** The call's arguments as compact JSON, cut to 500 characters. */
    input: z.string(),
    created_at: z.string(),
  })
  .strict();
export type WaitingApproval = z.infer<typeof waitingApprovalSchema>;
export const waitingApprovalsSchema = z.object({ approvals: z.array(waitingApprovalSchema) }).strict();
