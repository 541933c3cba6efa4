import type { LanguageModelV3 } from "@ai-sdk/provider";

/** The model a process uses, resolved once from configuration. */
export interface ResolvedModel {
  model: LanguageModelV3;
  /** Shown in the UI and stored on runs, e.g. "simulator" or "gpt-4o-mini". */
  name: string;
  simulator: boolean;
}
