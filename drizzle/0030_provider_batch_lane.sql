CREATE TABLE "provider_batches" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"user_id" uuid NOT NULL,
	"batch_id" uuid NOT NULL,
	"provider" text NOT NULL,
	"external_id" text,
	"input_file_id" text,
	"state" text DEFAULT 'submitting' NOT NULL,
	"provider_status" text,
	"requests" integer DEFAULT 0 NOT NULL,
	"succeeded" integer DEFAULT 0 NOT NULL,
	"errored" integer DEFAULT 0 NOT NULL,
	"expired" integer DEFAULT 0 NOT NULL,
	"cancelled" integer DEFAULT 0 NOT NULL,
	"lease_owner" text,
	"lease_expires_at" timestamp with time zone,
	"polls" integer DEFAULT 0 NOT NULL,
	"next_poll_at" timestamp with time zone DEFAULT now() NOT NULL,
	"last_error" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"ended_at" timestamp with time zone
);
--> statement-breakpoint
ALTER TABLE "subagent_batch_items" ADD COLUMN "provider_batch_id" uuid;--> statement-breakpoint
ALTER TABLE "subagent_batches" ADD COLUMN "lane" text DEFAULT 'live' NOT NULL;--> statement-breakpoint
ALTER TABLE "provider_batches" ADD CONSTRAINT "provider_batches_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "provider_batches" ADD CONSTRAINT "provider_batches_batch_id_subagent_batches_id_fk" FOREIGN KEY ("batch_id") REFERENCES "public"."subagent_batches"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "provider_batches_batch_idx" ON "provider_batches" USING btree ("batch_id","created_at");--> statement-breakpoint
CREATE INDEX "provider_batches_due_idx" ON "provider_batches" USING btree ("next_poll_at") WHERE state in ('submitting', 'in_progress', 'canceling', 'ended');--> statement-breakpoint
CREATE INDEX "subagent_batch_items_provider_batch_idx" ON "subagent_batch_items" USING btree ("provider_batch_id") WHERE provider_batch_id is not null and status = 'running';