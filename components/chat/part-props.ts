import type { DataUIPart, DynamicToolUIPart, ToolUIPart, UIDataTypes } from "ai";
import type { ChatMessage } from "@/lib/api/chat";

/**
 * What a card renderer of the chat receives. The cards import these types from here and
 * message-parts reads the cards from the registry (./part-renderers), so no card imports the
 * module that renders it.
 */

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

/** A tool part read loosely: the cards check its input and output themselves. */
export interface LooseToolPart {
  type: string;
  toolCallId?: string;
  state: string;
  input?: unknown;
  output?: unknown;
  errorText?: string;
}
