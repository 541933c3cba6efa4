"use client";

import { type DataUIPart, type DynamicToolUIPart, isToolUIPart, type ToolUIPart, type UIDataTypes } from "ai";
import type { ComponentType } from "react";
import type { ChatMessage } from "@/lib/api/chat";
import { BatchReceiptCard } from "@/components/batches/receipt-card";
import { BatchStatusCard } from "./batch-status-card";
import { Markdown } from "./markdown";
import { SubagentToolCard } from "./subagent-card";
import { SwarmToolCard } from "./swarm-card";
import { ToolCard } from "./tool-card";

export type ChatPart = ChatMessage["parts"][number];

/** What a dedicated tool component receives. */
export interface ToolPartProps {
  part: ToolUIPart | DynamicToolUIPart;
  message: ChatMessage;
  threadId: string;
  /** True while this message is still streaming. */
  streaming: boolean;
}

/** What a dedicated data-part component receives (live updates written by tools). */
export interface DataPartProps {
  part: DataUIPart<UIDataTypes>;
  message: ChatMessage;
  threadId: string;
  streaming: boolean;
}

/**
 * Part type → component. One line per delegation mode, added when its component exists
 * (`tool-task` → subagent-card, `tool-agent_swarm` → swarm-card, `tool-batch_task` → receipt-card).
 * Tool parts without an entry render the generic ToolCard; data parts without one render nothing.
 */
const TOOL_COMPONENTS: Record<string, ComponentType<ToolPartProps>> = {
  "tool-task": SubagentToolCard,
  "tool-agent_swarm": SwarmToolCard,
  "tool-batch_task": BatchReceiptCard,
  "tool-batch_status": BatchStatusCard,
};
const DATA_COMPONENTS: Record<string, ComponentType<DataPartProps>> = {};

export function MessagePart({
  part,
  message,
  threadId,
  streaming,
}: {
  part: ChatPart;
  message: ChatMessage;
  threadId: string;
  streaming: boolean;
}) {
  if (part.type === "text") {
    // The user's own words stay as typed; the agent's replies are markdown.
    if (message.role === "user") return <div className="whitespace-pre-wrap break-words leading-relaxed">{part.text}</div>;
    return <Markdown text={part.text} streaming={streaming && part.state === "streaming"} />;
  }
  if (part.type === "reasoning") {
    return (
      <details className="text-sm text-zinc-500">
        <summary className="cursor-pointer select-none">Reasoning</summary>
        <div className="mt-1 whitespace-pre-wrap break-words border-l-2 border-zinc-200 pl-3">{part.text}</div>
      </details>
    );
  }
  if (isToolUIPart(part)) {
    const Dedicated = TOOL_COMPONENTS[part.type];
    if (Dedicated) return <Dedicated part={part} message={message} threadId={threadId} streaming={streaming} />;
    return <ToolCard part={part} stopped={!streaming && message.metadata?.status === "cancelled"} />;
  }
  if (part.type.startsWith("data-")) {
    const Dedicated = DATA_COMPONENTS[part.type];
    return Dedicated ? (
      <Dedicated part={part as DataUIPart<UIDataTypes>} message={message} threadId={threadId} streaming={streaming} />
    ) : null;
  }
  // step-start, sources and files carry nothing to show in this chat.
  return null;
}

export function MessageParts({ message, threadId, streaming }: { message: ChatMessage; threadId: string; streaming: boolean }) {
  return (
    <div className="space-y-3">
      {message.parts.map((part, i) => (
        <MessagePart key={`${message.id}-${i}`} part={part} message={message} threadId={threadId} streaming={streaming} />
      ))}
    </div>
  );
}
