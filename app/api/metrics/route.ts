import { requireAdmin } from "@/server/auth/authenticate";
import { getConfig } from "@/server/config/load";
import { getDatabase } from "@/server/db/client";
import { AppError } from "@/server/errors";
import { handle } from "@/server/http/route";
import { checkMetricsToken, configureMetrics, renderMetrics } from "@/server/metrics";

export const dynamic = "force-dynamic";

/**
 * Prometheus text exposition of this web process, for the admin. With `metrics.token` (or
 * FLOTILLA_METRICS_TOKEN) configured, scrapers send `Authorization: Bearer <that token>` and
 * only it is accepted; otherwise the caller must be the admin (session or personal API token).
 */
export const GET = handle(async (req: Request) => {
  const token = getConfig().metrics.token ?? process.env.FLOTILLA_METRICS_TOKEN;
  if (token) {
    if (!checkMetricsToken(req.headers.get("authorization"), { FLOTILLA_METRICS_TOKEN: token }))
      throw new AppError("unauthorized", "metrics token required");
  } else {
    await requireAdmin(req);
  }
  configureMetrics({ role: "web", db: getDatabase().db });
  const { contentType, body } = await renderMetrics();
  return new Response(body, { status: 200, headers: { "content-type": contentType, "cache-control": "no-store" } });
});
