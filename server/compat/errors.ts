import { AppError } from "@/server/errors";

/** An error that names the offending parameter (OpenAI's `param`). */
export class CompatParamError extends AppError {
  constructor(
    readonly param: string,
    message: string,
  ) {
    super("validation_failed", message);
  }
}
