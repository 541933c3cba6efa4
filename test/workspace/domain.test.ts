import { randomBytes } from "node:crypto";
import { beforeAll, describe, expect, it } from "vitest";
import { fileGlobMatcher, globForPaths } from "@/lib/api/files";
import {
  DOWNLOAD_SLICE_BYTES,
  deleteFile,
  listFiles,
  matchFiles,
  openFileStream,
  putFile,
  workspaceLimits,
} from "@/server/workspace/files";
import { contentTypeFor, pathProblem } from "@/server/workspace/paths";
import { makeOwner, testConfig } from "../batches/support";
import { createTestDatabase, type TestDatabase } from "../helpers/db";

/** The workspace domain functions directly: streamed reads across slices, globbing, path rules. */

let tdb: TestDatabase;
const limits = workspaceLimits(testConfig());

beforeAll(async () => {
  tdb = await createTestDatabase();
});

async function drain(body: ReadableStream<Uint8Array>): Promise<{ bytes: Buffer; chunks: number }> {
  const chunks: Uint8Array[] = [];
  const reader = body.getReader();
  for (let r = await reader.read(); !r.done; r = await reader.read()) chunks.push(r.value);
  return { bytes: Buffer.concat(chunks), chunks: chunks.length };
}

describe("openFileStream", () => {
  it("streams a file larger than one slice, slice by slice, byte for byte", async () => {
    const owner = await makeOwner(tdb.db);
    const bytes = randomBytes(DOWNLOAD_SLICE_BYTES * 2 + 1234);
    await putFile(tdb.db, { ...owner, limits }, { path: "big.bin", bytes, contentType: "application/octet-stream" });
    const { file, body } = await openFileStream(tdb.db, { ...owner, path: "big.bin" });
    expect(file.size).toBe(bytes.length);
    const read = await drain(body);
    expect(read.chunks).toBe(3);
    expect(read.bytes.equals(bytes)).toBe(true);
  });

  it("ends with an error, never mixed bytes, when the file is overwritten or deleted mid-download", async () => {
    const owner = await makeOwner(tdb.db);
    const put = (fill: number) =>
      putFile(
        tdb.db,
        { ...owner, limits },
        { path: "v.bin", bytes: Buffer.alloc(DOWNLOAD_SLICE_BYTES * 3, fill), contentType: "application/octet-stream" },
      );
    await put(1);
    const { body } = await openFileStream(tdb.db, { ...owner, path: "v.bin" });
    const reader = body.getReader();
    const first = await reader.read();
    expect(first.value?.every((b) => b === 1)).toBe(true);
    await put(2);
    await expect(reader.read()).rejects.toThrow("v.bin changed during the download");

    const again = await openFileStream(tdb.db, { ...owner, path: "v.bin" });
    const r2 = again.body.getReader();
    await r2.read();
    await deleteFile(tdb.db, { ...owner, path: "v.bin" });
    await expect(r2.read()).rejects.toThrow("changed during the download");
  });
});

describe("globs", () => {
  it("matchFiles: * within a folder, ** across folders, dotfiles, path order, owner-scoped", async () => {
    const owner = await makeOwner(tdb.db);
    const other = await makeOwner(tdb.db);
    for (const path of ["b.md", "a.md", "docs/c.md", "docs/deep/d.md", ".hidden.md", "x.txt"])
      await putFile(tdb.db, { ...owner, limits }, { path, bytes: Buffer.from(path), contentType: "text/plain" });
    await putFile(tdb.db, { ...other, limits }, { path: "a.md", bytes: Buffer.from("other"), contentType: "text/plain" });
    expect(await matchFiles(tdb.db, { ...owner, glob: "*.md" })).toEqual([".hidden.md", "a.md", "b.md"]);
    expect(await matchFiles(tdb.db, { ...owner, glob: "docs/**" })).toEqual(["docs/c.md", "docs/deep/d.md"]);
    expect(await matchFiles(tdb.db, { ...owner, glob: "**/*.md" })).toHaveLength(5);
    expect(await matchFiles(tdb.db, { ...other, glob: "**" })).toEqual(["a.md"]);
    await expect(matchFiles(tdb.db, { ...owner, glob: " " })).rejects.toThrow("files: a glob of 1 to 512 characters");
    expect((await listFiles(tdb.db, { ...owner, prefix: "docs/" })).map((f) => f.path)).toEqual(["docs/c.md", "docs/deep/d.md"]);
  });

  it("globForPaths matches exactly the picked paths, whatever glob characters they contain", () => {
    const all = ["a (1).md", "x,y.md", "b.md", "dir/[c].txt", "q+r.md", "n!.md", "e{f}.md", "star*.md", "what?.md"];
    const picked = ["a (1).md", "x,y.md", "dir/[c].txt", "n!.md", "e{f}.md", "star*.md"];
    const matching = (glob: string) => {
      const isMatch = fileGlobMatcher(glob);
      return all.filter((p) => isMatch(p));
    };
    expect(matching(globForPaths(picked))).toEqual(picked);
    expect(matching(globForPaths(["what?.md"]))).toEqual(["what?.md"]);
  });
});

describe("path rules and content types", () => {
  it.each([
    ["reports/q1.md", null],
    ["a", null],
    ["ünïcode/файл.txt", null],
    ["", "must not be empty"],
    ["./a", 'must not contain a "." segment'],
    ["a/", "empty segments"],
    ["a\tb", "control characters"],
    ["a\u007fb", "control characters"],
  ])("%j → %s", (path, problem) => {
    const found = pathProblem(path);
    if (problem === null) expect(found).toBeNull();
    else expect(found).toContain(problem);
  });

  it("keeps a well-formed declared type, guesses from the extension otherwise, never echoes junk", () => {
    expect(contentTypeFor("a.csv", "text/csv")).toBe("text/csv");
    expect(contentTypeFor("a.md", "application/octet-stream")).toBe("text/markdown; charset=utf-8");
    expect(contentTypeFor("a.md", "text/html\r\nX-Evil: 1")).toBe("text/markdown; charset=utf-8");
    expect(contentTypeFor("Makefile", null)).toBe("application/octet-stream");
  });
});
