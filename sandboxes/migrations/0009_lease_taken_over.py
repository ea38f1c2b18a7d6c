from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sandboxes", "0008_exec_output_size"),
    ]

    operations = [
        migrations.AddField(
            model_name="lease",
            name="taken_over",
            field=models.BooleanField(
                default=False,
                help_text=(
                    "Held by a takeover: it lasts until released, or until expires_at when the "
                    "operator set a ceiling (none: no expiry); calls do not renew it."
                ),
            ),
        ),
    ]
