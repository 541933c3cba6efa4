CREATE TABLE "compat_batches" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"user_id" uuid NOT NULL,
	"api" text NOT NULL,
	"batch_id" uuid,
	"input_file_id" uuid,
	"endpoint" text,
	"completion_window" text NOT NULL,
	"metadata" jsonb,
	"errors" jsonb,
	"total" integer NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	"cancel_requested_at" timestamp with time zone,
	"expired_at" timestamp with time zone,
	CONSTRAINT "compat_batches_batch_id_unique" UNIQUE("batch_id")
);
--> statement-breakpoint
CREATE TABLE "compat_file_chunks" (
	"file_id" uuid NOT NULL,
	"seq" integer NOT NULL,
	"data" "bytea" NOT NULL,
	CONSTRAINT "compat_file_chunks_file_id_seq_pk" PRIMARY KEY("file_id","seq")
);
--> statement-breakpoint
CREATE TABLE "compat_files" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"user_id" uuid NOT NULL,
	"filename" text NOT NULL,
	"purpose" text NOT NULL,
	"bytes" bigint NOT NULL,
	"lines" integer NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "compat_requests" (
	"item_id" uuid PRIMARY KEY NOT NULL,
	"body" jsonb NOT NULL
);
--> statement-breakpoint
ALTER TABLE "compat_batches" ADD CONSTRAINT "compat_batches_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "compat_batches" ADD CONSTRAINT "compat_batches_batch_id_subagent_batches_id_fk" FOREIGN KEY ("batch_id") REFERENCES "public"."subagent_batches"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "compat_file_chunks" ADD CONSTRAINT "compat_file_chunks_file_id_compat_files_id_fk" FOREIGN KEY ("file_id") REFERENCES "public"."compat_files"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "compat_files" ADD CONSTRAINT "compat_files_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "compat_requests" ADD CONSTRAINT "compat_requests_item_id_subagent_batch_items_id_fk" FOREIGN KEY ("item_id") REFERENCES "public"."subagent_batch_items"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "compat_batches_list_idx" ON "compat_batches" USING btree ("user_id","api","created_at","id");--> statement-breakpoint
CREATE INDEX "compat_files_user_idx" ON "compat_files" USING btree ("user_id","created_at","id");