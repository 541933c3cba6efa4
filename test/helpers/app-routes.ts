// Before Next's request stores load: they take AsyncLocalStorage from the global Next sets up.
import "next/dist/server/node-environment-baseline";
import { readdirSync } from "node:fs";
import path from "node:path";
import { createRequestStoreForAPI } from "next/dist/server/async-storage/request-store";
import { createWorkStore } from "next/dist/server/async-storage/work-store";
import { workAsyncStorage } from "next/dist/server/app-render/work-async-storage.external";
import { workUnitAsyncStorage } from "next/dist/server/app-render/work-unit-async-storage.external";
import { NextRequest } from "next/server";

/**
 * Every route handler under app/ (each `route.ts`), routed as Next's app router does: static
 * segments before [dynamic] before [...catch-all] before [[...optional]], route groups and
 * private folders ignored. Handlers run inside Next's request stores, so `headers()` and
 * `cookies()` (next-auth's route uses them) work as under `next start`. Modules load on first use.
 */

const APP_DIR = path.resolve(__dirname, "../../app");

type Segment = { kind: "static"; name: string } | { kind: "dynamic" | "catchall" | "optional"; name: string };
export type RouteHandler = (req: Request, ctx: { params: Promise<Record<string, string | string[]>> }) => Promise<Response>;

interface AppRoute {
  /** The app-router page, e.g. /api/threads/[threadId]/route. */
  page: string;
  file: string;
  segments: Segment[];
}

function parseSegment(name: string): Segment {
  let m = /^\[\[\.\.\.(.+)\]\]$/.exec(name);
  if (m) return { kind: "optional", name: m[1]! };
  m = /^\[\.\.\.(.+)\]$/.exec(name);
  if (m) return { kind: "catchall", name: m[1]! };
  m = /^\[(.+)\]$/.exec(name);
  if (m) return { kind: "dynamic", name: m[1]! };
  return { kind: "static", name };
}

const RANK = { static: 0, dynamic: 1, catchall: 2, optional: 3 } as const;

function compareRoutes(a: AppRoute, b: AppRoute): number {
  for (let i = 0; i < Math.min(a.segments.length, b.segments.length); i++) {
    const diff = RANK[a.segments[i]!.kind] - RANK[b.segments[i]!.kind];
    if (diff !== 0) return diff;
  }
  return b.segments.length - a.segments.length;
}

function scan(dir: string, segments: Segment[], pageParts: string[], out: AppRoute[]): void {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      if (entry.name.startsWith("_") || entry.name.startsWith("@")) continue;
      const group = /^\(.+\)$/.test(entry.name);
      scan(full, group ? segments : [...segments, parseSegment(entry.name)], [...pageParts, entry.name], out);
    } else if (/^route\.(ts|tsx|js)$/.test(entry.name)) {
      out.push({ page: `/${[...pageParts, "route"].join("/")}`, file: full, segments });
    }
  }
}

let table: AppRoute[] | undefined;

export function appRoutes(): AppRoute[] {
  if (!table) {
    const found: AppRoute[] = [];
    scan(APP_DIR, [], [], found);
    table = found.sort(compareRoutes);
  }
  return table;
}

function matchSegments(segments: Segment[], parts: string[]): Record<string, string | string[]> | null {
  const params: Record<string, string | string[]> = {};
  for (let i = 0; i < segments.length; i++) {
    const seg = segments[i]!;
    if (seg.kind === "catchall" || seg.kind === "optional") {
      const rest = parts.slice(i);
      if (rest.length === 0 && seg.kind === "catchall") return null;
      if (rest.length > 0) params[seg.name] = rest;
      return params;
    }
    const part = parts[i];
    if (part === undefined) return null;
    if (seg.kind === "static" ? part !== seg.name : false) return null;
    if (seg.kind === "dynamic") params[seg.name] = part;
  }
  return parts.length === segments.length ? params : null;
}

export interface RouteMatch {
  route: AppRoute;
  params: Record<string, string | string[]>;
}

export function matchRoute(pathname: string): RouteMatch | null {
  const parts = pathname.split("/").filter(Boolean).map((p) => decodeURIComponent(p));
  for (const route of appRoutes()) {
    const params = matchSegments(route.segments, parts);
    if (params) return { route, params };
  }
  return null;
}

const modules = new Map<string, Promise<Record<string, unknown>>>();

export async function routeHandler(route: AppRoute, method: string): Promise<RouteHandler | undefined> {
  let loaded = modules.get(route.file);
  if (!loaded) {
    loaded = import(route.file) as Promise<Record<string, unknown>>;
    modules.set(route.file, loaded);
  }
  const mod = await loaded;
  const handler = mod[method] ?? (method === "HEAD" ? mod.GET : undefined);
  return typeof handler === "function" ? (handler as RouteHandler) : undefined;
}

/** Loads now the handlers of every route whose page starts with one of `prefixes` (e.g. "/v1/"). */
export async function preloadRoutes(prefixes: string[]): Promise<void> {
  const wanted = appRoutes().filter((r) => prefixes.some((p) => r.page.startsWith(p)));
  await Promise.all(wanted.map((r) => routeHandler(r, "GET")));
}

const json = (status: number, code: string, message: string) =>
  Response.json({ error: { code, message } }, { status, headers: { "content-type": "application/json" } });

/**
 * Answers a request as `next start` would answer it with the matching route handler: 404 for
 * an unknown path, 405 for a method the route does not export.
 */
export async function dispatch(request: Request): Promise<Response> {
  const url = new URL(request.url);
  const match = matchRoute(url.pathname);
  if (!match) return json(404, "not_found", `no route for ${url.pathname}`);
  const handler = await routeHandler(match.route, request.method);
  if (!handler) return json(405, "method_not_allowed", `${request.method} is not allowed on ${url.pathname}`);
  const nextRequest = request instanceof NextRequest ? request : new NextRequest(request);
  return runInRequestScope(match.route.page, nextRequest, () => handler(nextRequest, { params: Promise.resolve(match.params) }));
}

/** Next's per-request stores, as its route module sets them up for a route handler. */
function runInRequestScope<T>(page: string, req: NextRequest, fn: () => Promise<T>): Promise<T> {
  const requestStore = createRequestStoreForAPI(
    { headers: Object.fromEntries(req.headers) } as never,
    { pathname: req.nextUrl.pathname, search: req.nextUrl.search },
    { tags: [], expirationsByCacheKind: new Map() } as never,
    undefined,
    undefined,
    undefined,
  );
  const workStore = createWorkStore({
    page,
    renderOpts: { experimental: {}, supportsDynamicResponse: true } as never,
    isPrefetchRequest: false,
    buildId: "test",
    previouslyRevalidatedTags: [],
  } as never);
  return workAsyncStorage.run(workStore, () => workUnitAsyncStorage.run(requestStore, fn));
}
