import type {
  LanguageModelV3CallOptions,
  LanguageModelV3Prompt,
  LanguageModelV3ToolResultOutput,
} from "@ai-sdk/provider";
import { isRepairRequest, type LeadNotice, readNotice } from "@/lib/api/model-facts";

/** What the simulator reads of a prompt: the latest user message, what followed it, and sizes. */

type UserMessage = Extract<LanguageModelV3Prompt[number], { role: "user" }>;

const textOf = (message: UserMessage) =>
  message.content
    .filter((p) => p.type === "text")
    .map((p) => p.text)
    .join("\n");

const isRepair = (message: UserMessage) => message.content.some((p) => p.type === "text" && isRepairRequest(p.providerOptions));

/** Text of the latest user message (all its text parts joined). */
export function latestUserText(prompt: LanguageModelV3Prompt): string {
  for (let i = prompt.length - 1; i >= 0; i--) {
    const message = prompt[i];
    if (message.role === "user") return textOf(message);
  }
  return "";
}

/** True when the prompt ends with a typed answer's repair request. */
export function isRepairTurn(prompt: LanguageModelV3Prompt): boolean {
  const last = prompt[prompt.length - 1];
  return last?.role === "user" && isRepair(last);
}

/** Text of the latest user message that is not a repair request: the item's own prompt. */
export function itemPromptText(prompt: LanguageModelV3Prompt): string {
  for (let i = prompt.length - 1; i >= 0; i--) {
    const message = prompt[i];
    if (message.role === "user" && !isRepair(message)) return textOf(message);
  }
  return "";
}

/** Every text the model is given: the system prompt and the user messages. */
export function allTexts(prompt: LanguageModelV3Prompt): string[] {
  return prompt.flatMap((m) => (m.role === "system" ? [m.content] : m.role === "user" ? [textOf(m)] : []));
}

/** The notice the latest message carries when it is one (a lead turn that is not the user's). */
export function latestNotice(prompt: LanguageModelV3Prompt): LeadNotice | undefined {
  const last = prompt[prompt.length - 1];
  if (last?.role !== "user") return undefined;
  for (const part of last.content) {
    const notice = part.type === "text" ? readNotice(part.providerOptions) : undefined;
    if (notice) return notice;
  }
  return undefined;
}

/** Messages after the latest user message (this message's earlier steps). */
export function sinceLatestUser(prompt: LanguageModelV3Prompt): LanguageModelV3Prompt {
  for (let i = prompt.length - 1; i >= 0; i--) if (prompt[i].role === "user") return prompt.slice(i + 1);
  return [];
}

export function outputToText(output: LanguageModelV3ToolResultOutput): string {
  switch (output.type) {
    case "text":
      return output.value;
    case "json":
      return JSON.stringify(output.value) ?? "null";
    case "error-text":
      return `error: ${output.value}`;
    case "error-json":
      return `error: ${JSON.stringify(output.value)}`;
    case "execution-denied":
      return `denied${output.reason ? `: ${output.reason}` : ""}`;
    case "content":
      return output.value.map((p) => (p.type === "text" ? p.text : `[${p.type}]`)).join(" ");
    default:
      return "";
  }
}

/** Characters the model "reads": every message, tool input and tool result, plus the tool definitions. */
export function promptChars(options: LanguageModelV3CallOptions): number {
  let chars = 0;
  for (const message of options.prompt) {
    if (message.role === "system") {
      chars += message.content.length;
      continue;
    }
    for (const part of message.content) {
      if (part.type === "text" || part.type === "reasoning") chars += part.text.length;
      else if (part.type === "tool-call") chars += part.toolName.length + JSON.stringify(part.input ?? {}).length;
      else if (part.type === "tool-result") chars += part.toolName.length + outputToText(part.output).length;
    }
  }
  for (const tool of options.tools ?? []) {
    chars += JSON.stringify(tool).length;
  }
  return chars;
}

export function estimateTokens(chars: number): number {
  return chars <= 0 ? 0 : Math.ceil(chars / 4);
}

/** FNV-1a: a small, stable hash so the same prompt always yields the same answer. */
export function hash(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

export function promptFingerprint(prompt: LanguageModelV3Prompt): string {
  return prompt
    .map((m) => {
      if (m.role === "system") return `system:${m.content}`;
      const body = m.content
        .map((p) => {
          if (p.type === "text" || p.type === "reasoning") return p.text;
          if (p.type === "tool-call") return `${p.toolName}(${JSON.stringify(p.input ?? {})})`;
          if (p.type === "tool-result") return `${p.toolName}=>${outputToText(p.output)}`;
          return p.type;
        })
        .join("|");
      return `${m.role}:${body}`;
    })
    .join("\n");
}
