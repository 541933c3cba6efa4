/**
 * The built-in simulator, the model every newcomer meets: model.ts (the AI SDK language model:
 * streaming, usage, latency, failures and 429s), directives.ts (the `[[...]]` test directives),
 * grammar.ts (how "task: …", "swarm: …", "batch: …" become tool calls), answers.ts (what it
 * says) and prompt.ts (what it reads). This file is its public surface.
 */
export { stripDirectives } from "./directives";
export {
  createSimulatorModel,
  resetSimulatorOnceState,
  SIMULATOR_MODEL_ID,
  SIMULATOR_PROVIDER,
  type SimulatorOptions,
} from "./model";
