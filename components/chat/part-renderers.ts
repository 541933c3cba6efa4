import type { ComponentType } from "react";
import { BatchReceiptCard } from "@/components/batches/receipt-card";
import { BatchStatusCard } from "./batch-status-card";
import type { DataPartProps, ToolPartProps } from "./part-props";
import { SubagentToolCard } from "./subagent-card";
import { SwarmToolCard } from "./swarm-card";

/**
 * Part type → card. One line per delegation mode. Tool parts without an entry render the
 * generic ToolCard; data parts without one render nothing (the cards read their live data
 * parts from the message themselves).
 */
export const TOOL_RENDERERS: Readonly<Record<string, ComponentType<ToolPartProps>>> = {
  "tool-task": SubagentToolCard,
  "tool-agent_swarm": SwarmToolCard,
  "tool-batch_task": BatchReceiptCard,
  "tool-batch_status": BatchStatusCard,
};

export const DATA_RENDERERS: Readonly<Record<string, ComponentType<DataPartProps>>> = {};
