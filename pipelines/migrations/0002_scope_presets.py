"""Seed the four sandbox scope presets, labelled in the dashboard's eight languages."""

from django.db import migrations

PRESETS = [
    {
        "slug": "per-chat",
        "template": "{launcher_type}_{launcher_id}",
        "is_default": True,
        "labels": {
            "en": "Per chat (recommended)",
            "zh-hans": "每个会话（推荐）",
            "zh-hant": "每個會話（推薦）",
            "ja": "チャットごと（推奨）",
            "ko": "채팅별 (권장)",
            "es": "Por chat (recomendado)",
            "fr": "Par discussion (recommandé)",
            "ru": "Для каждого чата (рекомендуется)",
        },
        "descriptions": {
            "en": "One sandbox per chat window: everyone in a group shares it; a private chat "
            "has its own.",
            "zh-hans": "每个聊天窗口一个沙箱：群聊中的所有人共享，私聊各自独立。",
            "zh-hant": "每個聊天視窗一個沙箱：群組中的所有人共用，私聊各自獨立。",
            "ja": "チャットウィンドウごとに 1 つのサンドボックス。グループでは全員で共有し、"
            "個別チャットはそれぞれ専用です。",
            "ko": "채팅 창마다 샌드박스 하나: 그룹에서는 모두가 공유하고, 개인 채팅은 각자 따로 "
            "가집니다.",
            "es": "Un sandbox por ventana de chat: en un grupo lo comparten todos; un chat "
            "privado tiene el suyo.",
            "fr": "Un bac à sable par fenêtre de discussion : tout le groupe le partage ; une "
            "discussion privée a le sien.",
            "ru": "Одна песочница на окно чата: в группе она общая для всех, у личного чата — "
            "своя.",
        },
    },
    {
        "slug": "per-user-in-chat",
        "template": "{launcher_type}_{launcher_id}_{sender_id}",
        "labels": {
            "en": "Per user in chat",
            "zh-hans": "会话中每个用户",
            "zh-hant": "會話中每個使用者",
            "ja": "チャット内のユーザーごと",
            "ko": "채팅 내 사용자별",
            "es": "Por usuario en el chat",
            "fr": "Par utilisateur dans la discussion",
            "ru": "Для каждого пользователя в чате",
        },
        "descriptions": {
            "en": "Each member of a chat gets their own sandbox, separate in every chat.",
            "zh-hans": "聊天中的每个成员拥有各自的沙箱，不同聊天之间互不相通。",
            "zh-hant": "聊天中的每個成員擁有各自的沙箱，不同聊天之間互不相通。",
            "ja": "チャットのメンバーごとに専用のサンドボックス。チャットが違えば別のサンドボックス"
            "です。",
            "ko": "채팅의 각 구성원이 자신만의 샌드박스를 가지며, 채팅마다 별도입니다.",
            "es": "Cada miembro de un chat tiene su propio sandbox, distinto en cada chat.",
            "fr": "Chaque membre d'une discussion a son propre bac à sable, distinct dans chaque "
            "discussion.",
            "ru": "У каждого участника чата своя песочница, отдельная в каждом чате.",
        },
    },
    {
        "slug": "per-conversation",
        "template": "{launcher_type}_{launcher_id}_{conversation_id}",
        "labels": {
            "en": "Per conversation context",
            "zh-hans": "每个对话上下文",
            "zh-hant": "每個對話上下文",
            "ja": "会話コンテキストごと",
            "ko": "대화 컨텍스트별",
            "es": "Por contexto de conversación",
            "fr": "Par contexte de conversation",
            "ru": "Для каждого контекста беседы",
        },
        "descriptions": {
            "en": "One sandbox per conversation context in a chat; a new conversation starts "
            "with a fresh sandbox.",
            "zh-hans": "聊天中的每个对话上下文一个沙箱；开始新对话即获得新的沙箱。",
            "zh-hant": "聊天中的每個對話上下文一個沙箱；開始新對話即獲得新的沙箱。",
            "ja": "チャット内の会話コンテキストごとに 1 つのサンドボックス。新しい会話を始めると"
            "新しいサンドボックスになります。",
            "ko": "채팅 안의 대화 컨텍스트마다 샌드박스 하나: 새 대화를 시작하면 새 샌드박스가 "
            "생깁니다.",
            "es": "Un sandbox por cada contexto de conversación de un chat; una conversación "
            "nueva empieza con un sandbox nuevo.",
            "fr": "Un bac à sable par contexte de conversation ; une nouvelle conversation "
            "repart d'un bac à sable neuf.",
            "ru": "Отдельная песочница для каждого контекста беседы в чате; новая беседа "
            "начинается с новой песочницы.",
        },
    },
    {
        "slug": "per-message",
        "template": "{query_id}",
        "labels": {
            "en": "Per message (isolated)",
            "zh-hans": "每条消息（完全隔离）",
            "zh-hant": "每則訊息（完全隔離）",
            "ja": "メッセージごと（完全分離）",
            "ko": "메시지별 (완전 격리)",
            "es": "Por mensaje (aislado)",
            "fr": "Par message (isolé)",
            "ru": "Для каждого сообщения (изолированно)",
        },
        "descriptions": {
            "en": "A fresh sandbox for every message; nothing carries over between messages.",
            "zh-hans": "每条消息使用全新的沙箱；消息之间不保留任何内容。",
            "zh-hant": "每則訊息使用全新的沙箱；訊息之間不保留任何內容。",
            "ja": "メッセージごとに新しいサンドボックス。メッセージ間で何も引き継がれません。",
            "ko": "메시지마다 새 샌드박스: 메시지 사이에 아무것도 이어지지 않습니다.",
            "es": "Un sandbox nuevo para cada mensaje; nada pasa de un mensaje a otro.",
            "fr": "Un bac à sable neuf pour chaque message ; rien n'est conservé d'un message à "
            "l'autre.",
            "ru": "Новая песочница для каждого сообщения; между сообщениями ничего не сохраняется.",
        },
    },
]


def seed(apps, schema_editor):
    SessionTemplate = apps.get_model("pipelines", "SessionTemplate")
    for position, preset in enumerate(PRESETS):
        SessionTemplate.objects.update_or_create(
            slug=preset["slug"],
            defaults={
                "template": preset["template"],
                "labels": preset["labels"],
                "descriptions": preset["descriptions"],
                "is_default": preset.get("is_default", False),
                "position": position,
            },
        )


def unseed(apps, schema_editor):
    apps.get_model("pipelines", "SessionTemplate").objects.filter(
        slug__in=[preset["slug"] for preset in PRESETS]
    ).delete()


class Migration(migrations.Migration):
    dependencies = [("pipelines", "0001_initial")]
    operations = [migrations.RunPython(seed, unseed)]
