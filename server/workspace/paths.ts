import { AppError } from "@/server/errors";

/** Longest workspace path, in characters. */
export const MAX_PATH_CHARS = 512;

// C0 and C1 control characters and DEL: never part of a file name a person or a model means.
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

/** Why `path` is not a workspace path, or null when it is one. */
export function pathProblem(path: string): string | null {
  if (path.length === 0) return "must not be empty";
  if (path.length > MAX_PATH_CHARS) return `must be at most ${MAX_PATH_CHARS} characters`;
  if (CONTROL.test(path)) return "must not contain control characters";
  if (path.includes("\\")) return "must use / as the separator (no backslash)";
  if (path.startsWith("/")) return "must be relative (no leading /)";
  for (const segment of path.split("/")) {
    if (segment === "") return "must not contain empty segments (// or a trailing /)";
    if (segment === "." || segment === "..") return `must not contain a "${segment}" segment`;
  }
  return null;
}

/** The path itself when valid; otherwise 400 validation_failed naming the field and the path. */
export function checkPath(path: string, field = "path"): string {
  const problem = pathProblem(path);
  if (problem) throw new AppError("validation_failed", `${field}: ${JSON.stringify(path.slice(0, 600))} ${problem}`);
  return path;
}

/** A folder prefix for uploads and listings: a valid path, one trailing "/" allowed. */
export function checkPrefix(prefix: string, field = "prefix"): string {
  return checkPath(prefix.endsWith("/") ? prefix.slice(0, -1) : prefix, field);
}

const TYPES: Record<string, string> = {
  txt: "text/plain; charset=utf-8",
  md: "text/markdown; charset=utf-8",
  csv: "text/csv; charset=utf-8",
  json: "application/json",
  jsonl: "application/x-ndjson",
  html: "text/html; charset=utf-8",
  xml: "application/xml",
  yaml: "application/yaml",
  yml: "application/yaml",
  pdf: "application/pdf",
  png: "image/png",
  jpg: "image/jpeg",
  jpeg: "image/jpeg",
  gif: "image/gif",
  svg: "image/svg+xml",
  zip: "application/zip",
};

const MEDIA_TYPE = /^[a-z0-9!#$&^_.+-]+\/[a-z0-9!#$&^_.+-]+(\s*;\s*[a-z0-9_-]+=[a-z0-9_.-]+)*$/i;

/**
 * The content type to store: the one the client declared when it is a well-formed media type
 * other than the generic octet-stream, else a guess from the extension. Never free text, since
 * it is sent back as a response header.
 */
export function contentTypeFor(path: string, declared?: string | null): string {
  const given = declared?.trim();
  if (given && given.toLowerCase() !== "application/octet-stream" && given.length <= 200 && MEDIA_TYPE.test(given))
    return given;
  const ext = path.split("/").pop()!.split(".").slice(1).pop()?.toLowerCase();
  return (ext && TYPES[ext]) || "application/octet-stream";
}
