import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeThread, makeUser, setupApiDatabase } from "../api/helpers";
import { send, startWebServer, type WebServer } from "../helpers/web-server";

/**
 * The tests' real-socket server: every route handler under app/, routed as Next routes them,
 * behind the production front door. Sign-in goes through next-auth's own route (which reads
 * headers() and cookies(), so Next's request scope is there) from a chosen source address.
 */

const tdb = await setupApiDatabase();
let server: WebServer;

beforeAll(async () => {
  server = await startWebServer();
});
afterAll(() => server.close());

describe("test web server", () => {
  it("serves static, dynamic and catch-all routes, 404 for an unknown path and 405 for a method a route lacks", async () => {
    expect(JSON.parse((await send(server, "/api/health")).body)).toEqual({ status: "ok", database: "ok" });
    const user = await makeUser(tdb);
    const threadId = await makeThread(tdb, user);
    const auth = { authorization: `Bearer ${user.token}` };
    const thread = await send(server, `/api/threads/${threadId}`, { headers: auth });
    expect(thread.status).toBe(200);
    expect(JSON.parse(thread.body).id).toBe(threadId);
    // subagent-batches/seen is a static segment beside [batchId]: Next prefers it, and so must this router.
    const seen = await send(server, `/api/threads/${threadId}/subagent-batches/seen`, { method: "POST", headers: auth, json: {} });
    expect(seen.status).not.toBe(404);
    const missingFile = await send(server, `/api/threads/${threadId}/files/a/b.txt`, { headers: auth });
    expect(missingFile.status).toBe(404);
    expect(JSON.parse(missingFile.body).error.code).toBe("not_found");
    expect((await send(server, "/api/nowhere")).status).toBe(404);
    expect((await send(server, "/api/health", { method: "DELETE" })).status).toBe(405);
  });

  it("signs in through next-auth's credentials flow from a chosen source address", async () => {
    const user = await makeUser(tdb, "signin");
    const csrf = await send(server, "/api/auth/csrf", { from: "127.0.0.7" });
    const { csrfToken } = JSON.parse(csrf.body) as { csrfToken: string };
    const cookie = (csrf.headers["set-cookie"] ?? []).map((c) => c.split(";")[0]).join("; ");
    const signIn = (password: string) =>
      send(server, "/api/auth/callback/credentials", {
        from: "127.0.0.7",
        headers: { "content-type": "application/x-www-form-urlencoded", cookie },
        body: new URLSearchParams({ csrfToken, email: user.email, password, json: "true" }).toString(),
      });
    const wrong = await signIn("wrong password");
    expect(JSON.parse(wrong.body).url).toMatch(/error=CredentialsSignin/);
    const right = await signIn("correct horse battery");
    expect(right.status).toBe(200);
    expect((right.headers["set-cookie"] ?? []).some((c) => c.startsWith("next-auth.session-token="))).toBe(true);
  });
});
