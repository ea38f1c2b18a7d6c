from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save


class PipelinesConfig(AppConfig):
    name = "pipelines"
    verbose_name = "Pipelines"

    def ready(self) -> None:
        from pipelines.models import Pipeline, PipelineToken
        from pipelines.selectors import forget_principals

        # A token's pipeline is kept briefly per process; a change here is seen at once.
        for model in (Pipeline, PipelineToken):
            post_save.connect(
                forget_principals, sender=model, dispatch_uid=f"forget-{model.__name__}"
            )
            post_delete.connect(
                forget_principals, sender=model, dispatch_uid=f"forget-del-{model.__name__}"
            )
