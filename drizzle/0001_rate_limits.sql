CREATE TABLE "model_rate_limits" (
	"endpoint" text PRIMARY KEY NOT NULL,
	"next_request_at" timestamp with time zone DEFAULT now() NOT NULL,
	"next_token_at" timestamp with time zone DEFAULT now() NOT NULL,
	"slow_until" timestamp with time zone,
	"requests" bigint DEFAULT 0 NOT NULL,
	"tokens" bigint DEFAULT 0 NOT NULL,
	"rate_limited" bigint DEFAULT 0 NOT NULL,
	"last_rate_limited_at" timestamp with time zone,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
