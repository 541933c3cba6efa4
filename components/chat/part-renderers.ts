import { type ComponentType, createElement } from "react";
import { BatchReceiptCard } from "@/components/batches/receipt-card";
import { BatchStatusCard } from "./batch-status-card";
import type { DataPartProps, ToolPartProps } from "./part-props";
import { SubagentToolCard } from "./subagent-card";
import { SwarmToolCard } from "./swarm-card";
import { ToolCard } from "./tool-card";

/** batch_task: its approval card (the estimate, Run / pilot / Cancel) while it waits or was cancelled, else the receipt. */
function BatchTaskCard(props: ToolPartProps) {
  const waits = props.part.state === "approval-requested" || props.part.state === "output-denied";
  return waits ? createElement(ToolCard, { part: props.part, threadId: props.threadId }) : createElement(BatchReceiptCard, props);
}

/**
 * Part type → card. One line per delegation mode. Tool parts without an entry render the
 * generic ToolCard; data parts without one render nothing (the cards read their live data
 * parts from the message themselves).
 */
export const TOOL_RENDERERS: Readonly<Record<string, ComponentType<ToolPartProps>>> = {
  "tool-task": SubagentToolCard,
  "tool-agent_swarm": SwarmToolCard,
  "tool-batch_task": BatchTaskCard,
  "tool-batch_status": BatchStatusCard,
};

export const DATA_RENDERERS: Readonly<Record<string, ComponentType<DataPartProps>>> = {};
