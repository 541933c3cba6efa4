"use client";

import { type DataUIPart, isToolUIPart, type UIDataTypes } from "ai";
import type { ChatMessage } from "@/lib/api/chat";
import { LongText } from "./long-text";
import { Markdown } from "./markdown";
import { DATA_RENDERERS, TOOL_RENDERERS } from "./part-renderers";
import { ToolCard } from "./tool-card";

export type ChatPart = ChatMessage["parts"][number];

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
    if (message.role === "user")
      return (
        <LongText
          text={part.text}
          streaming={false}
          render={(text) => <div className="whitespace-pre-wrap break-words leading-relaxed">{text}</div>}
        />
      );
    const live = streaming && part.state === "streaming";
    return <LongText text={part.text} streaming={live} render={(text) => <Markdown text={text} streaming={live} />} />;
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
    const Card = TOOL_RENDERERS[part.type];
    if (Card) return <Card part={part} message={message} threadId={threadId} streaming={streaming} />;
    return <ToolCard part={part} stopped={!streaming && message.metadata?.status === "cancelled"} threadId={threadId} />;
  }
  if (part.type.startsWith("data-")) {
    const Card = DATA_RENDERERS[part.type];
    return Card ? <Card part={part as DataUIPart<UIDataTypes>} message={message} threadId={threadId} streaming={streaming} /> : null;
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
