/**
 * Glob matching in time linear in the path: the glob compiles to a Thompson NFA that is run
 * over the path one character at a time with a set of live states, so no input backtracks
 * (`*a*a*a*a*a*b` against a long name costs glob length × path length steps, not an
 * exponential search). Syntax, POSIX paths, dotfiles matched:
 *   `*` any run within a folder, `?` one character but `/`, `**` as a whole segment any number
 *   of folders (`a/**` also matches `a`), `[abc]` `[a-z]` `[!a]` `[^a]` `[[:digit:]]` classes,
 *   `{a,b}` alternatives (nested), `@(a|b)` `(a|b)` `?(a)` `*(a)` `+(a)` groups, `\x` a literal
 *   x, and a leading `!` negates the whole glob. `!(...)` is refused (not a regular language
 *   step a linear matcher takes), and so is a glob whose unclosed groups would take the parser
 *   more than MAX_PARSE_STEPS atoms.
 * Pure and client-safe: the server and the New batch dialog's preview use the same matcher.
 */

type Node =
  | { t: "char"; c: string }
  | { t: "one" }
  | { t: "class"; test: (c: string) => boolean }
  | { t: "star" }
  | { t: "any" }
  | { t: "seq"; items: Node[] }
  | { t: "alt"; options: Node[] }
  | { t: "opt"; node: Node }
  | { t: "rep"; node: Node; min: 0 | 1 };

export class GlobError extends Error {}

const POSIX_CLASSES: Record<string, (c: string) => boolean> = {
  alpha: (c) => /[A-Za-z]/.test(c),
  digit: (c) => c >= "0" && c <= "9",
  alnum: (c) => /[A-Za-z0-9]/.test(c),
  upper: (c) => c >= "A" && c <= "Z",
  lower: (c) => c >= "a" && c <= "z",
  space: (c) => /\s/.test(c),
  word: (c) => /\w/.test(c),
  xdigit: (c) => /[0-9A-Fa-f]/.test(c),
  punct: (c) => /[!-/:-@[-`{-~]/.test(c),
};

const seq = (items: Node[]): Node => (items.length === 1 ? items[0]! : { t: "seq", items });

/**
 * Most atoms one parse may read. An unclosed `{` or `(` is read again as a literal, so deeply
 * nested unclosed groups could cost exponential time; past this budget the glob is refused
 * instead (ordinary globs read each character once or twice).
 */
const MAX_PARSE_STEPS = 10_000;

/** Recursive-descent parser over the glob (at most 512 characters). */
class Parser {
  i = 0;
  steps = 0;
  constructor(readonly src: string) {}

  /** A sequence up to one of `stops` (not consumed) or the end. */
  sequence(stops: string): Node {
    const items: Node[] = [];
    while (this.i < this.src.length && !stops.includes(this.src[this.i]!)) items.push(this.atom(items));
    return seq(items);
  }

  atom(before: Node[]): Node {
    if (++this.steps > MAX_PARSE_STEPS)
      throw new GlobError("the glob is too complex (nested groups that never close); simplify it");
    const s = this.src;
    const c = s[this.i]!;
    const next = s[this.i + 1];
    if (c === "\\" && this.i + 1 < s.length) {
      this.i += 2;
      return { t: "char", c: next! };
    }
    if ("?*+@!".includes(c) && next === "(") return this.extglob(c);
    if (c === "(") return this.extglob("@", 0);
    if (c === "*") return this.stars(before);
    if (c === "?") {
      this.i++;
      return { t: "one" };
    }
    if (c === "[") {
      const cls = this.charClass();
      if (cls) return cls;
    }
    if (c === "{") {
      const alt = this.braces();
      if (alt) return alt;
    }
    this.i++;
    return { t: "char", c };
  }

  /** `*` within a folder; `**` as a whole segment spans folders (with the slash after it). */
  stars(before: Node[]): Node {
    const s = this.src;
    const start = this.i;
    while (s[this.i] === "*") this.i++;
    const count = this.i - start;
    const segmentStart = start === 0 || s[start - 1] === "/";
    const segmentEnd = this.i === s.length || s[this.i] === "/";
    // "**" opening the glob spans folders whatever follows it ("**.md" matches "a/b.md").
    if (count === 2 && start === 0 && !segmentEnd) return { t: "any" };
    if (count !== 2 || !segmentStart || !segmentEnd) return { t: "star" };
    if (s[this.i] === "/") {
      // `**/` : nothing, or any folders followed by their slash.
      this.i++;
      return { t: "opt", node: seq([{ t: "any" }, { t: "char", c: "/" }]) };
    }
    // Trailing `/**`: the folder itself or anything below it (the slash before is made optional).
    const last = before.at(-1);
    if (last?.t === "char" && last.c === "/") {
      before.pop();
      return { t: "opt", node: seq([{ t: "char", c: "/" }, { t: "any" }]) };
    }
    return { t: "any" };
  }

  extglob(kind: string, prefix = 1): Node {
    if (kind === "!") throw new GlobError("!(...) patterns are not supported; use a leading ! to exclude");
    const open = this.i;
    this.i += prefix + 1;
    const options: Node[] = [this.sequence("|)")];
    while (this.src[this.i] === "|") {
      this.i++;
      options.push(this.sequence("|)"));
    }
    if (this.src[this.i] !== ")") {
      // Unclosed: the characters are literal.
      this.i = open + 1;
      return { t: "char", c: this.src[open]! };
    }
    this.i++;
    const node: Node = options.length === 1 ? options[0]! : { t: "alt", options };
    if (kind === "?") return { t: "opt", node };
    if (kind === "*") return { t: "rep", node, min: 0 };
    if (kind === "+") return { t: "rep", node, min: 1 };
    return node;
  }

  /** `{a,b}` alternatives; a brace group without a comma (or unclosed) is literal. */
  braces(): Node | null {
    const open = this.i;
    this.i++;
    const options: Node[] = [this.sequence(",}")];
    while (this.src[this.i] === ",") {
      this.i++;
      options.push(this.sequence(",}"));
    }
    if (this.src[this.i] !== "}" || options.length < 2) {
      this.i = open;
      return null;
    }
    this.i++;
    return { t: "alt", options };
  }

  charClass(): Node | null {
    const s = this.src;
    let j = this.i + 1;
    const negated = s[j] === "!" || s[j] === "^";
    if (negated) j++;
    const tests: ((c: string) => boolean)[] = [];
    let first = true;
    while (j < s.length && (s[j] !== "]" || first)) {
      first = false;
      if (s[j] === "[" && s[j + 1] === ":") {
        const end = s.indexOf(":]", j + 2);
        const name = end > 0 ? s.slice(j + 2, end) : "";
        const test = POSIX_CLASSES[name];
        if (test) {
          tests.push(test);
          j = end + 2;
          continue;
        }
      }
      let lo = s[j]!;
      if (lo === "\\" && j + 1 < s.length) lo = s[++j]!;
      j++;
      if (s[j] === "-" && j + 1 < s.length && s[j + 1] !== "]") {
        let hi = s[j + 1]!;
        j += 2;
        if (hi === "\\" && j < s.length) hi = s[j++]!;
        const [a, b] = [lo, hi];
        tests.push((c) => c >= a && c <= b);
      } else {
        const only = lo;
        tests.push((c) => c === only);
      }
    }
    if (j >= s.length) return null; // unclosed: a literal "["
    this.i = j + 1;
    return { t: "class", test: (c) => c !== "/" && tests.some((t) => t(c)) !== negated };
  }
}

// NFA: states with either a character test and one successor, or epsilon successors.
interface State {
  test: ((c: string) => boolean) | null;
  out: number[];
}

const notSlash = (c: string) => c !== "/";
const anyChar = () => true;

class Builder {
  states: State[] = [];

  add(test: State["test"]): number {
    this.states.push({ test, out: [] });
    return this.states.length - 1;
  }

  /** Builds `node` between a fresh entry state and a fresh exit state; returns both. */
  build(node: Node): { start: number; end: number } {
    const start = this.add(null);
    const end = this.add(null);
    this.wire(node, start, end);
    return { start, end };
  }

  /** Adds states so that `from` reaches `to` over exactly the strings `node` matches. */
  wire(node: Node, from: number, to: number): void {
    const st = this.states;
    switch (node.t) {
      case "char":
      case "one":
      case "class": {
        const test = node.t === "char" ? (c: string) => c === node.c : node.t === "one" ? notSlash : node.test;
        const s = this.add(test);
        st[from]!.out.push(s);
        st[s]!.out.push(to);
        return;
      }
      case "star":
      case "any": {
        // A self-loop: from -> loop -ε-> to, loop consumes one character back to itself.
        const loop = this.add(null);
        const step = this.add(node.t === "star" ? notSlash : anyChar);
        st[from]!.out.push(loop);
        st[loop]!.out.push(step, to);
        st[step]!.out.push(loop);
        return;
      }
      case "seq": {
        let at = from;
        node.items.forEach((item, k) => {
          const next = k === node.items.length - 1 ? to : this.add(null);
          this.wire(item, at, next);
          at = next;
        });
        if (node.items.length === 0) st[from]!.out.push(to);
        return;
      }
      case "alt":
        for (const option of node.options) this.wire(option, from, to);
        return;
      case "opt":
        st[from]!.out.push(to);
        this.wire(node.node, from, to);
        return;
      case "rep": {
        const loop = this.add(null);
        const back = this.add(null);
        st[from]!.out.push(loop);
        if (node.min === 0) st[loop]!.out.push(to);
        this.wire(node.node, loop, back);
        st[back]!.out.push(loop, to);
        return;
      }
    }
  }
}

/** A set of NFA states met while matching (a state of the lazily built DFA), with its cached transitions. */
interface SetState {
  states: number[];
  accepts: boolean;
  next: Map<string, SetState>;
}

/** Most cached state sets per matcher; past it the cache starts afresh (still correct, only slower). */
const MAX_CACHED_SETS = 10_000;

/**
 * A matcher for `glob`. Throws GlobError for syntax it refuses. The NFA is simulated with
 * state sets built lazily into a DFA and cached (as RE2 does): a set is computed once, in at
 * most (number of NFA states) steps, and every later path reuses it, so each path costs one
 * lookup per character once the sets it meets are known, and never more than NFA states ×
 * path length. The state count is linear in the glob.
 */
export function compileGlob(glob: string): (path: string) => boolean {
  const negate = glob.startsWith("!") && !glob.startsWith("!(");
  // Paths never start with "./", and "**/**" is "**".
  const body = (negate ? glob.slice(1) : glob).replace(/^(\.\/)+/, "").replace(/(^|\/)\*\*(?:\/\*\*)+(?=\/|$)/g, "$1**");
  const root = new Parser(body).sequence("");
  const builder = new Builder();
  const { start, end } = builder.build(root);
  const states = builder.states;
  const mark = new Uint32Array(states.length);
  let generation = 0;
  const cache = new Map<string, SetState>();

  // Everything reachable from the seeds over epsilon edges, keeping the character-consuming states and the end.
  const close = (seeds: number[]): number[] => {
    if (generation > 0x7fff_0000) {
      mark.fill(0);
      generation = 0;
    }
    generation++;
    const into: number[] = [];
    const stack = seeds;
    while (stack.length > 0) {
      const s = stack.pop()!;
      if (mark[s] === generation) continue;
      mark[s] = generation;
      const state = states[s]!;
      if (state.test || s === end) into.push(s);
      else for (const o of state.out) stack.push(o);
    }
    return into.sort((a, b) => a - b);
  };

  const intern = (set: number[]): SetState => {
    const key = set.join(",");
    let found = cache.get(key);
    if (!found) {
      if (cache.size >= MAX_CACHED_SETS) {
        // Start afresh: the old sets (reachable only through each other) become garbage.
        cache.clear();
        initial = null;
      }
      found = { states: set, accepts: set.includes(end), next: new Map() };
      cache.set(key, found);
    }
    return found;
  };

  const step = (from: SetState, c: string): SetState => {
    let to = from.next.get(c);
    if (!to) {
      const seeds: number[] = [];
      for (const s of from.states) {
        const state = states[s]!;
        if (state.test?.(c)) for (const o of state.out) seeds.push(o);
      }
      to = intern(close(seeds));
      from.next.set(c, to);
    }
    return to;
  };

  let initial: SetState | null = null;
  const run = (path: string): boolean => {
    initial ??= intern(close([start]));
    let current = initial;
    for (let k = 0; k < path.length && current.states.length > 0; k++) current = step(current, path[k]!);
    return current.accepts;
  };

  return negate ? (path) => !run(path) : run;
}
