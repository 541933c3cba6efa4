import { z } from "zod";
import { batchEstimateSchema } from "./batches";

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

const SEEN_ERROR = "must be how many waiting calls of this tool you were shown (a whole number, 0 or more)";

/**
 * POST .../subagent-batches/{id}/approvals: one decision for every waiting call of `tool` (its
 * name as the model sees it). `seen`: how many of them the person was shown; the decision is
 * taken only while exactly that many wait (else 409 with `waiting`, and nothing is decided).
 */
export const batchApprovalsSchema = z
  .object({
    tool: z.string().min(1, { error: "must name a tool" }).max(256, { error: "must be at most 256 characters" }),
    decision: approvalDecisionSchema,
    seen: z.number({ error: SEEN_ERROR }).int({ error: SEEN_ERROR }).min(0, { error: SEEN_ERROR }),
    reason: z.string().max(APPROVAL_REASON_MAX_CHARS, { error: `must be at most ${APPROVAL_REASON_MAX_CHARS} characters` }).optional(),
  })
  .strict();

export const batchApprovalsResultSchema = z.object({ decided: z.number().int() }).strict();

/** Its 409: `waiting` is how many calls of the tool wait now (the count to show, and to send as `seen`). */
export const batchApprovalsConflictSchema = z
  .object({
    error: z.object({ code: z.literal("conflict"), message: z.string() }).strict(),
    waiting: z.number().int(),
  })
  .strict();

/** GET .../subagent-batches/{id}/approvals: the calls waiting for a person, in item order (at most 100). */
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
/** Every waiting call counted per tool (all of them, beyond the 100 listed): what "Approve all N" says and sends as `seen`. */
export const waitingToolSchema = z.object({ tool: z.string(), waiting: z.number().int() }).strict();
export type WaitingTool = z.infer<typeof waitingToolSchema>;
export const waitingApprovalsSchema = z.object({ approvals: z.array(waitingApprovalSchema), tools: z.array(waitingToolSchema) }).strict();

/**
 * Approvals in the chat (DESIGN "Working alongside the agents"): a call of the lead or of a task
 * or swarm child that waits for a person. The browser names only the approval and the decision.
 */

/** How many items "Run a pilot of N" on a batch_task's card runs first. */
export const CARD_PILOT_ITEMS = 10;

/**
 * POST /api/threads/{id}/approvals/{approval_id}: an item's decision body (`reason` ≤ 2,000
 * characters), and on a batch_task's card `option: "pilot"` with approve: run a pilot of
 * CARD_PILOT_ITEMS first.
 */
export const chatApprovalDecisionSchema = itemApprovalSchema
  .extend({ option: z.enum(["pilot"], { error: 'must be "pilot"' }).optional() })
  .refine((v) => v.option === undefined || v.decision === "approve", { path: ["option"], error: 'only with decision "approve"' });
export type ChatApprovalDecision = z.infer<typeof chatApprovalDecisionSchema>;

/** One call waiting in a thread: GET /api/threads/{id}/approvals. */
export const chatApprovalSchema = z
  .object({
    id: z.string(),
    /** The run that asked: the lead's run, or the task / swarm child's. */
    run_id: z.string(),
    /** `lead` or `child`: where the card sits (the lead's tool part, or its child's card). */
    kind: z.enum(["lead", "child"]),
    /** The call's id as the model gave it (the lead's tool part carries it). */
    tool_call_id: z.string(),
    /** The tool's name as the model sees it. */
    tool: z.string(),
    /** The call's arguments, exactly as the call will get them. */
    input: z.unknown(),
    /** A lead's batch_task over subagent_batches.confirm_over_usd: what it would cost. */
    estimate: batchEstimateSchema.optional(),
    created_at: z.string(),
    /** When the call is denied for want of a decision (tools.approval_timeout_seconds). */
    expires_at: z.string(),
  })
  .strict();
export type ChatApproval = z.infer<typeof chatApprovalSchema>;
export const chatApprovalsSchema = z.object({ approvals: z.array(chatApprovalSchema) }).strict();

/** POST /api/threads/{id}/approvals/{approval_id}: the decided call. */
export const decidedChatApprovalSchema = z
  .object({
    id: z.string(),
    run_id: z.string(),
    tool: z.string(),
    status: z.enum(["approved", "denied"]),
    reason: z.string().nullable(),
    /** "pilot" when the person chose a batch_task's pilot. */
    option: z.string().nullable(),
    decided_at: z.string(),
  })
  .strict();
export type DecidedChatApproval = z.infer<typeof decidedChatApprovalSchema>;
