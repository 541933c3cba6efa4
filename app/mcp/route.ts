import { handle } from "@/server/http/route";
import { refuseMcpMethod, serveMcp } from "@/server/mcp/serve";

export const dynamic = "force-dynamic";

/** The MCP server (server/mcp/): Streamable HTTP, stateless, a personal API token as the bearer. */
export const POST = handle(serveMcp);
export const GET = handle(refuseMcpMethod);
export const DELETE = handle(refuseMcpMethod);
