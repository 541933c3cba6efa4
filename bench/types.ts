/** What a benchmark module reports: one row per metric, ours against a baseline measured in the same run. */

export interface BenchRow {
  metric: string;
  /** Our measurement (unit in the metric name). */
  ours: number;
  /** The reference measured in the same run. */
  baseline: number;
  /** ours / baseline. */
  ratio: number;
  /** Highest acceptable ratio. */
  target: number;
}

export interface BenchModule {
  name: string;
  run(): Promise<BenchRow[]>;
}
