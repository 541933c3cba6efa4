/** What a benchmark module reports: one row per metric, ours against a baseline measured in the same run. */

export interface BenchRow {
  metric: string;
  /** Our measurement (unit in the metric name). */
  ours: number;
  /** The reference measured in the same run. */
  baseline: number;
  /** ours / baseline. */
  ratio: number;
  /** Highest acceptable ratio; with `tolerance`, the ratio the row must hit. */
  target: number;
  /** An exact target: the row passes only when |ratio - target| <= tolerance (its ratio printed in full). */
  tolerance?: number;
}

export interface BenchModule {
  name: string;
  run(): Promise<BenchRow[]>;
}
