import type { FlotillaConfig } from "@/lib/config";
import type { SpecDefinition } from "@/server/batches/spec";
import { AppError } from "@/server/errors";
import { findCatalogEntry } from "@/server/models/catalog";
import { resolveModelByName } from "@/server/models/index";
import type { ResolvedModel } from "@/server/models/types";

/**
 * Named sub-agent definitions. Built-ins are always present; `subagents.definitions` in the
 * configuration adds new ones or replaces a built-in of the same name.
 */

/** A definition as it runs (the shape a batch spec snapshots), plus whether it is built in. */
export interface SubagentDefinition extends SpecDefinition {
  builtin: boolean;
}

const SHARED_RULES =
  "You are a sub-agent working for a lead agent, not talking to the end user. " +
  "You get one self-contained task. Do it fully with what you are given, then answer once. " +
  "Your final message is returned verbatim to the lead agent, so make it complete and self-contained: " +
  "no greetings, no questions back, no references to this conversation. " +
  "If the task cannot be done, say so plainly and say why.";

function builtins(config: FlotillaConfig): SubagentDefinition[] {
  const maxTurns = config.subagents.max_turns;
  const timeoutMs = config.subagents.timeout_seconds * 1000;
  return [
    {
      name: "general",
      description: "General-purpose worker for any self-contained task: analysis, drafting, answering a question.",
      systemPrompt: `${SHARED_RULES}\nWork carefully and report the result with the key reasoning in a few short paragraphs.`,
      toolGroups: ["clock", "text"],
      maxTurns,
      timeoutMs,
      builtin: true,
    },
    {
      name: "researcher",
      description:
        "Investigates one question from the material in its prompt and reports findings with evidence and open questions.",
      systemPrompt:
        `${SHARED_RULES}\nYou investigate. Structure the answer as: Findings (bullet points, each with the evidence ` +
        "it rests on), Confidence (high/medium/low and why), Open questions. Separate facts given to you from inferences.",
      toolGroups: ["clock", "text"],
      maxTurns,
      timeoutMs,
      builtin: true,
    },
    {
      name: "summarizer",
      description: "Condenses the text in its prompt into a faithful short summary with the key points.",
      systemPrompt:
        `${SHARED_RULES}\nYou summarize. Keep only what the text says; add nothing. Start with a one-sentence ` +
        "summary, then at most seven bullet points with the key facts, numbers and names.",
      toolGroups: ["text"],
      maxTurns: Math.min(maxTurns, 3),
      timeoutMs,
      builtin: true,
    },
    {
      // No tool groups: one model call an item, so the providers' batch lane takes it.
      name: "data",
      description:
        "Answers one data item in a single model call, without tools: classify, label, extract, rewrite. The one built-in the providers' batch lane takes.",
      systemPrompt:
        `${SHARED_RULES}\nYou process one data item. Answer with exactly what the task asks for (the label, the ` +
        "extracted fields, the rewritten text) and nothing else: no preamble, no explanation unless asked.",
      toolGroups: [],
      maxTurns: 1,
      timeoutMs,
      builtin: true,
    },
  ];
}

function fromConfig(config: FlotillaConfig): SubagentDefinition[] {
  return config.subagents.definitions.map((d) => {
    return {
      name: d.name,
      description: d.description,
      systemPrompt: d.system_prompt,
      toolGroups: [...d.tool_groups],
      model: d.model,
      maxTurns: d.max_turns,
      timeoutMs: d.timeout_seconds * 1000,
      ...(d.output_schema ? { outputSchema: d.output_schema } : {}),
      builtin: false,
    };
  });
}

const cache = new WeakMap<FlotillaConfig, Map<string, SubagentDefinition>>();

function table(config: FlotillaConfig): Map<string, SubagentDefinition> {
  let t = cache.get(config);
  if (!t) {
    t = new Map();
    for (const d of builtins(config)) t.set(d.name, d);
    for (const d of fromConfig(config)) t.set(d.name, d);
    cache.set(config, t);
  }
  return t;
}

/** All definitions available under this configuration, built-ins first. */
export function listSubagents(config: FlotillaConfig): SubagentDefinition[] {
  return [...table(config).values()];
}

/** The names a caller may choose from. Every configured definition is open to every user. */
export function subagentNames(config: FlotillaConfig): string[] {
  return listSubagents(config).map((d) => d.name);
}

/** The named definition; throws AppError("validation_failed") naming the known ones. */
export function getSubagentDefinition(name: string, config: FlotillaConfig): SubagentDefinition {
  const d = table(config).get(name);
  if (!d)
    throw new AppError(
      "validation_failed",
      `subagent: unknown sub-agent "${name}" (available: ${[...table(config).keys()].join(", ")})`,
    );
  return d;
}

/**
 * What a batch door hands the one writer (server/batches/submit.ts): the named definition
 * (default general) and the allowlist it was checked against, resolved here at the edge. A
 * submission's `model` (a catalog name) becomes the definition's own model, so it runs every item.
 */
export function batchSubagent(
  config: FlotillaConfig,
  name: string | undefined,
  model?: string,
): { definition: SubagentDefinition; allowedSubagents: string[] } {
  const definition = getSubagentDefinition(name ?? "general", config);
  if (model !== undefined && !findCatalogEntry(config, model))
    throw new AppError("validation_failed", `model: unknown model "${model}" (not in the model catalog)`);
  return { definition: model === undefined ? definition : { ...definition, model }, allowedSubagents: subagentNames(config) };
}

/** One line per definition, for tool descriptions and the lead prompt. */
export function describeSubagents(config: FlotillaConfig): string {
  return listSubagents(config)
    .map((d) => `- ${d.name}: ${d.description}`)
    .join("\n");
}

/**
 * A sub-agent by name with the model it runs on: its definition's catalog model, else the
 * caller's. The edges (task and swarm tools, the compatible executor) call this; the executor
 * takes what it returns. Throws validation_failed (unknown name) or model_unavailable.
 */
export function resolveSubagent(
  config: FlotillaConfig,
  name: string,
  callerModel: ResolvedModel,
): { definition: SubagentDefinition; model: ResolvedModel } {
  const definition = getSubagentDefinition(name, config);
  const model =
    !definition.model || definition.model === callerModel.catalogName
      ? callerModel
      : resolveModelByName(config, definition.model);
  return { definition, model };
}
