ALTER TABLE "model_rate_limits" ADD COLUMN "next_input_token_at" timestamp with time zone DEFAULT now() NOT NULL;--> statement-breakpoint
ALTER TABLE "model_rate_limits" ADD COLUMN "next_output_token_at" timestamp with time zone DEFAULT now() NOT NULL;--> statement-breakpoint
ALTER TABLE "model_rate_limits" ADD COLUMN "learned_requests_per_minute" double precision;--> statement-breakpoint
ALTER TABLE "model_rate_limits" ADD COLUMN "learned_tokens_per_minute" double precision;--> statement-breakpoint
ALTER TABLE "model_rate_limits" ADD COLUMN "learned_input_tokens_per_minute" double precision;--> statement-breakpoint
ALTER TABLE "model_rate_limits" ADD COLUMN "learned_output_tokens_per_minute" double precision;--> statement-breakpoint
ALTER TABLE "model_rate_limits" ADD COLUMN "share_requests" double precision DEFAULT 1 NOT NULL;--> statement-breakpoint
ALTER TABLE "model_rate_limits" ADD COLUMN "share_tokens" double precision DEFAULT 1 NOT NULL;--> statement-breakpoint
ALTER TABLE "model_rate_limits" ADD COLUMN "share_input_tokens" double precision DEFAULT 1 NOT NULL;--> statement-breakpoint
ALTER TABLE "model_rate_limits" ADD COLUMN "share_output_tokens" double precision DEFAULT 1 NOT NULL;--> statement-breakpoint
ALTER TABLE "model_rate_limits" ADD COLUMN "tokens_per_call" double precision;--> statement-breakpoint
ALTER TABLE "model_rate_limits" ADD COLUMN "input_tokens_per_call" double precision;--> statement-breakpoint
ALTER TABLE "model_rate_limits" ADD COLUMN "output_tokens_per_call" double precision;--> statement-breakpoint
ALTER TABLE "model_rate_limits" ADD COLUMN "learned_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "model_rate_limits" ADD COLUMN "answered_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "model_rate_limits" ADD COLUMN "probe_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "model_rate_limits" ADD COLUMN "held_at" timestamp with time zone;