/**
 * The exact two-sided McNemar test on the discordant pairs of a paired comparison: under "no
 * change", each of the n = improved + regressed pairs is improved with probability 1/2, so the
 * p-value is twice the binomial tail of the smaller count, capped at 1. Summed in log space so
 * 100,000 discordant pairs neither overflow nor underflow to a wrong answer.
 */
export function mcnemarExactP(improved: number, regressed: number): number {
  const n = improved + regressed;
  if (n === 0) return 1;
  const k = Math.min(improved, regressed);
  const logHalfN = -n * Math.LN2;
  // log C(n, i) built up term by term: C(n, i) = C(n, i-1) * (n - i + 1) / i.
  let logC = 0;
  const terms: number[] = [];
  for (let i = 0; i <= k; i++) {
    if (i > 0) logC += Math.log(n - i + 1) - Math.log(i);
    terms.push(logC + logHalfN);
  }
  const max = Math.max(...terms);
  const tail = Math.exp(max) * terms.reduce((sum, t) => sum + Math.exp(t - max), 0);
  return Math.min(1, 2 * tail);
}

/** The p-value in words a person reads at a glance. */
export function pValueWords(p: number, improved: number, regressed: number): string {
  if (improved + regressed === 0) return "No item changed its verdict.";
  const direction = improved > regressed ? "better" : improved < regressed ? "worse" : "neither better nor worse";
  if (improved === regressed) return "As many items improved as regressed: no difference.";
  if (p < 0.01) return `Clearly ${direction} (p = ${formatP(p)}): a difference this size is very unlikely by chance.`;
  if (p < 0.05) return `Probably ${direction} (p = ${formatP(p)}): unlikely by chance.`;
  return `Not a clear difference (p = ${formatP(p)}): it could be chance.`;
}

function formatP(p: number): string {
  if (p < 0.0001) return "< 0.0001";
  return p.toFixed(p < 0.01 ? 4 : 2);
}
