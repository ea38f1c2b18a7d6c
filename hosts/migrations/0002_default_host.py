from django.db import migrations


def make_default_host(apps, schema_editor):
    """This machine's engine (BOXYARD_DOCKER_HOST or DOCKER_HOST) as the host `local`, where
    every sandbox made before hosts existed is."""
    DockerHost = apps.get_model("hosts", "DockerHost")
    if not DockerHost.objects.filter(is_default=True).exists():
        DockerHost.objects.create(name="local", url="", is_default=True)


class Migration(migrations.Migration):
    dependencies = [("hosts", "0001_initial")]

    operations = [migrations.RunPython(make_default_host, migrations.RunPython.noop)]
