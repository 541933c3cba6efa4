import {
  generateText,
  type LanguageModel,
  type ModelMessage,
  NoObjectGeneratedError,
  type StepResult,
  stepCountIs,
  type ToolSet,
} from "ai";
import { type ApprovalRequest, approvalRequestsOf } from "../chat-approvals";
import { readTypedAnswer, repairRequest, type TypedOutput } from "../structured-output";
import { type PromptCache, toolChars, withPromptCache } from "./prompt-cache";

/**
 * The model call stage: one generateText with the run's tools until the model answers or runs
 * out of turns; with an output schema, the structured output read and validated, and exactly
 * one repair turn (one step, no tools) quoting the validator's errors (none when the answer
 * took the schema longer than its time limit to check).
 */
export interface ModelCall {
  model: LanguageModel;
  system: string;
  tools: ToolSet;
  typed?: TypedOutput;
  /** Model steps this attempt may still take. */
  turnsLeft: number;
  signal: AbortSignal;
  /** Each finished step, with the transcript so far (usage, status, durable steps hang here). */
  onStep: (step: StepResult<ToolSet>, transcript: ModelMessage[]) => Promise<void> | void;
  /** The transcript as far as it got (what a run that fails midway keeps). */
  progress: { transcript: ModelMessage[] };
  /** How this call uses the provider's prompt cache (./prompt-cache.ts); absent: no marks, no key. */
  promptCache?: PromptCache;
}

export interface ModelAnswer {
  text: string;
  stopReason: string;
  transcript: ModelMessage[];
  approvals: ApprovalRequest[];
}

export type ModelOutcome =
  | { kind: "aborted"; transcript: ModelMessage[] }
  | { kind: "awaiting_approval"; approvals: ApprovalRequest[]; transcript: ModelMessage[] }
  | { kind: "answered"; answer: ModelAnswer; typed: boolean; output?: unknown }
  | { kind: "invalid_output"; answer: ModelAnswer; errors: string };

/** The whole stage: the call, then (typed) the reading and the repair turn. */
export async function answerWithModel(call: ModelCall, input: ModelMessage[]): Promise<ModelOutcome> {
  let answer = await askModel(call, input, false);
  if (call.signal.aborted) return { kind: "aborted", transcript: answer.transcript };
  if (answer.approvals.length > 0)
    return { kind: "awaiting_approval", approvals: answer.approvals, transcript: answer.transcript };
  if (!call.typed) return { kind: "answered", answer, typed: false };
  let read = await readTypedAnswer(answer.text, call.typed.schema);
  if (!read.ok && !read.final) {
    answer = await askModel(call, [...answer.transcript, repairRequest(read.errors)], true);
    if (call.signal.aborted) return { kind: "aborted", transcript: answer.transcript };
    read = await readTypedAnswer(answer.text, call.typed.schema);
  }
  if (!read.ok) return { kind: "invalid_output", answer, errors: read.errors };
  return { kind: "answered", answer: { ...answer, text: JSON.stringify(read.value) }, typed: true, output: read.value };
}

/**
 * One model call with its tool steps (`repair`: one step, no tools). A typed answer that is not
 * JSON makes the AI SDK throw; it is returned like any other answer, to be read by the caller.
 */
export async function askModel(call: ModelCall, messages: ModelMessage[], repair: boolean): Promise<ModelAnswer> {
  try {
    const sent = withPromptCache(call.promptCache, {
      system: call.typed ? `${call.system}\n\n${call.typed.instructions}` : call.system,
      messages,
      toolChars: () => toolChars(call.tools),
    });
    const result = await generateText({
      model: call.model,
      system: sent.system,
      messages: sent.messages,
      ...(sent.providerOptions ? { providerOptions: sent.providerOptions } : {}),
      tools: call.tools,
      ...(repair ? { toolChoice: "none" as const, stopWhen: stepCountIs(1) } : { stopWhen: stepCountIs(call.turnsLeft) }),
      ...(call.typed ? { output: call.typed.output } : {}),
      abortSignal: call.signal,
      onStepFinish: (step) => {
        call.progress.transcript = [...messages, ...step.response.messages];
        return call.onStep(step, call.progress.transcript);
      },
    });
    // Out of turns while still calling tools: the text so far is what we have.
    const stopReason =
      result.finishReason === "tool-calls" && result.steps.length >= call.turnsLeft ? "max_turns" : result.finishReason;
    return {
      text: result.text,
      stopReason,
      transcript: [...messages, ...result.response.messages],
      approvals: approvalRequestsOf(result.content),
    };
  } catch (err) {
    if (!call.typed || !NoObjectGeneratedError.isInstance(err) || call.signal.aborted) throw err;
    return { text: err.text ?? "", stopReason: err.finishReason ?? "stop", transcript: call.progress.transcript, approvals: [] };
  }
}
