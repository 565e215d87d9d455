"""The response bodies, as pydantic models: they are the schemas of the OpenAPI document, and the
tests validate real responses against that document, so a route that returns something else
fails a test. (The routes build their bodies with orjson directly: validating our own output
on every read would cost more than the read.)"""

from __future__ import annotations

from pydantic import BaseModel, Field


class PagePost(BaseModel):
    """A post as every page gives it; a deleted post is in no page."""

    post_id: str
    author: str
    ts: int = Field(description="milliseconds since the epoch (the time the store kept)")
    text: str | None = Field(description="the post's text; null for a post published without")


class TimelinePage(BaseModel):
    user: str
    posts: list[PagePost] = Field(description="newest first")
    next: str | None = Field(
        description="opaque cursor naming the last entry shown; null at the end"
    )


class AuthorPage(BaseModel):
    user: str
    posts: list[PagePost] = Field(description="the author's posts, newest first")
    next: str | None = Field(
        description="opaque cursor naming the last post shown; null at the end"
    )


class MemberPage(BaseModel):
    user: str
    members: list[str] = Field(description="sorted by id")
    count: int = Field(description="members in the whole list, not just this page")
    next: str | None = Field(description="opaque cursor; null at the end")


class FollowingAnswer(BaseModel):
    following: bool


class Accepted(BaseModel):
    event_ids: list[str] = Field(description="in the order sent; acknowledged by the broker")


class Health(BaseModel):
    status: str


class Ready(BaseModel):
    status: str
    checks: dict[str, str] = Field(description="per dependency: ok, or why not")


class TopicLag(BaseModel):
    topic: str
    committed: int = Field(description="the group's committed offsets, summed over partitions")
    end: int = Field(description="high watermarks, summed over partitions")
    lag: int = Field(description="messages not yet applied (approximate on Tansu)")


class ConsumerLagBody(BaseModel):
    consumer: str = Field(description="graph or fanout")
    group: str = Field(description="its Kafka consumer group")
    lag: int
    committed: int = Field(description="rate = its rise between two snapshots over their `at`")
    topics: list[TopicLag]


class Stats(BaseModel):
    at: int = Field(description="when the offsets were read, ms since the epoch")
    consumers: list[ConsumerLagBody]


class FieldErrorBody(BaseModel):
    field: str = Field(description="parameter name or dotted path in the body")
    rule: str
    index: int | None = Field(None, description="which event of a batch")


class ProblemBody(BaseModel):
    """RFC 9457 problem details."""

    type: str = Field(description="urn:fanout:problem:KIND")
    title: str
    status: int
    detail: str
    instance: str
    errors: list[FieldErrorBody] | None = None


MODELS: tuple[type[BaseModel], ...] = (
    PagePost,
    TimelinePage,
    AuthorPage,
    MemberPage,
    FollowingAnswer,
    Accepted,
    Health,
    Ready,
    TopicLag,
    ConsumerLagBody,
    Stats,
    FieldErrorBody,
    ProblemBody,
)
