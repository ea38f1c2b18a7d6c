"""What the Bay API keeps of its own: the answers of calls made with an `Idempotency-Key`,
replayed when the same call comes again with the same key."""

from django.db import models

from pipelines.models import Pipeline


class IdempotentCall(models.Model):
    """One pipeline's call made with a key: what it asked (`request`, a digest of its method,
    path and body) and, once answered, its answer. `status` 0: still being answered."""

    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200)
    request = models.CharField(max_length=64)
    status = models.PositiveSmallIntegerField(default=0)
    answer = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["pipeline", "key"], name="bay_one_call_per_key")
        ]

    def __str__(self) -> str:
        return f"{self.pipeline_id}:{self.key}"
