import type { LanguageModelV3 } from "@ai-sdk/provider";
import type { CatalogEntry } from "./catalog";

/** A catalog entry resolved to a model (with the shared middleware), once per process. */
export interface ResolvedModel {
  model: LanguageModelV3;
  /** Shown in the UI: the provider's model id, e.g. "simulator" or "gpt-4o-mini". */
  name: string;
  simulator: boolean;
  /** The catalog name (stored on runs and batch specs; prices and limits are looked up by it). */
  catalogName: string;
  entry: CatalogEntry;
  /** The rate-limit endpoint key (base URL + model id). */
  endpoint: string;
}
